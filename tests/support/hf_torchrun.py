"""One rank of a Hugging Face Trainer run under torchrun on 2 gloo ranks over a trainvault loader
(tests/library/integrations/test_hf_torchrun.py), with `TrainVaultTrainerMixin`: it trains to
--stop-at (checkpoints every 4 optimizer steps), then a second Trainer in the same processes
resumes from --resume-from with 2 DataLoader workers and trains to the end. Each rank writes
``rank<R>.json`` under --out: the record ids of every batch each run trained on."""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import Trainer, TrainingArguments

from trainvault import TrainVault, UngatedDataWarning
from trainvault.loading.hf import TrainVaultTrainerMixin


def collate(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": [r["id"] for r in records], "x": torch.tensor([[r["tokens"] / 100.0] for r in records])}


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(1, 1)
        self.seen: list[list[str]] = []

    def forward(self, x: torch.Tensor, id: list[str]) -> dict[str, torch.Tensor]:
        self.seen.append(list(id))
        return {"loss": self.w(x).pow(2).mean()}


class LoaderTrainer(TrainVaultTrainerMixin, Trainer):
    def __init__(self, *args: Any, loader: Any, **kwargs: Any):
        self.loader = loader
        super().__init__(*args, **kwargs)

    def get_train_dataloader(self) -> Any:
        return self.loader


def train(manifest: str, out: Path, workers: int, max_steps: int, resume: str | None) -> list[list[str]]:
    args = TrainingArguments(
        output_dir=str(out / "run"),
        max_steps=max_steps,
        gradient_accumulation_steps=2,
        save_strategy="steps",
        save_steps=4,
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        ddp_backend="gloo",
    )
    args.device  # noqa: B018  # sets up torch.distributed, which the loader takes its rank from
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UngatedDataWarning)
        factory = TrainVault().ungated_loader_factory(
            manifest,
            collate_fn=collate,
            shuffle=True,
            seed=4,
            dataloader_args={"batch_size": 5, "num_workers": workers, **({"timeout": 120} if workers else {})},
        )
    model = Model()
    LoaderTrainer(model=model, args=args, loader=factory.load("train")).train(resume_from_checkpoint=resume)
    return model.seen


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--manifest", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stop-at", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--resume-from", type=int, required=True)
    a = p.parse_args()
    out = Path(a.out)
    first = train(a.manifest, out, 0, a.stop_at, None)
    resumed = train(a.manifest, out, 2, a.steps, str(out / "run" / f"checkpoint-{a.resume_from}"))
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps({"first": first, "resumed": resumed}))


if __name__ == "__main__":
    main()
