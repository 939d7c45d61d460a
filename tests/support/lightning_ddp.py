"""One Lightning run with strategy="ddp" on 2 CPU ranks (gloo) over a trainvault loader
(tests/library/integrations/test_lightning_ddp.py). Lightning starts rank 1 by running this
script again; each rank writes ``rank<R>.json`` under --out: the record ids of every batch it
trained on, in a first fit to --stop-at and in a second that resumes from --resume, with 2
DataLoader workers, to --steps."""

from __future__ import annotations

import argparse
import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from trainvault import TrainVault, UngatedDataWarning


def collate(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": [r["id"] for r in records], "x": torch.tensor([float(r["tokens"]) for r in records])}


class Model(pl.LightningModule):
    def __init__(self, manifest: str, workers: int):
        super().__init__()
        self.w = torch.nn.Linear(1, 1)
        self.manifest, self.workers = manifest, workers
        self.seen: list[list[str]] = []

    def train_dataloader(self) -> Any:
        # Made here, after Lightning initialised torch.distributed: the loader takes its rank from it.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UngatedDataWarning)
            factory = TrainVault().ungated_loader_factory(
                self.manifest,
                collate_fn=collate,
                shuffle=True,
                seed=9,
                dataloader_args={"batch_size": 5, "num_workers": self.workers, "timeout": 120},
            )
        return factory.load("train")

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        self.seen.append(list(batch["id"]))
        return self.w(batch["x"].unsqueeze(1) / 100).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(manifest: str, out: Path, workers: int, max_steps: int, resume: str | None) -> list[list[str]]:
    model = Model(manifest, workers)
    trainer = pl.Trainer(
        strategy="ddp",
        accelerator="cpu",
        devices=2,
        max_steps=max_steps,
        default_root_dir=out,
        callbacks=[ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=6, save_top_k=-1)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, ckpt_path=resume)
    return model.seen


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--manifest", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stop-at", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--resume", required=True, help="the checkpoint's file name under <out>/first/ckpt")
    a = p.parse_args()
    out = Path(a.out)
    first = fit(a.manifest, out / "first", 0, a.stop_at, None)
    # The same two processes again: Lightning finds its ranks launched and the process group up.
    resumed = fit(a.manifest, out / "again", 2, a.steps, str(out / "first" / "ckpt" / a.resume))
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    (out / f"rank{rank}.json").write_text(json.dumps({"first": first, "resumed": resumed}))


if __name__ == "__main__":
    main()
