"""Bytes read to resume a Hugging Face Trainer run at step N: `TrainVaultTrainerMixin` against a
fresh start and against the Trainer's default skip.

One dataset of `--records` records (id + ~200 B of text) in blocks of `--block-bytes`, one
epoch of batches of `--batch-size` with 2 accumulation steps, a checkpoint at
`--resume-at` (a share of the epoch's optimizer steps). The Trainer runs a one-layer model on
CPU. Bytes are what the loader's fetcher read from storage (`figures()["window"]["bytes"]`,
the window set wider than the run), in the trainer's process (num_workers=0):

- ``fresh``: the run from step 0 to the end;
- ``default skip``: what the Trainer's own resume reads. accelerate's skip_first_batches reads
  and discards the batches before N; over a trainvault loader it is refused (it rebuilds a plain
  DataLoader over the dataset), so it is measured as that skip does it: the loader iterated from
  the start, the first N x 2 batches discarded, then the rest;
- ``mixin resume``: ``train(resume_from_checkpoint=checkpoint-N)`` with the mixin, to the end;
- ``needed`` (manifest order only): the blocks first read by the batches after N in an
  uninterrupted pass (the limit). Shuffled, a resume must read the whole shuffle window it
  lands in, which an uninterrupted pass read earlier (ahead of need): no per-step limit is
  measured, only the ratios to ``fresh``.

Printed per order (manifest order, and shuffled with the default window of 16 blocks), with
ratios to ``needed`` and to ``fresh``.

    .venv/bin/python bench/hf_resume.py --records 40000
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainingArguments

from trainvault import TrainVault, UngatedDataWarning
from trainvault.loading import Observability
from trainvault.loading.hf import TrainVaultTrainerMixin

GA = 2
WIDE = 10**9  # a figures window wider than any run: it sums every step


def to_inputs(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"x": torch.tensor([[len(r["text"]) / 100.0] for r in records])}


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(1, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": self.w(x).pow(2).mean()}


class LoaderTrainer(TrainVaultTrainerMixin, Trainer):
    def __init__(self, *args: Any, loader: Any, **kwargs: Any):
        self.loader = loader
        super().__init__(*args, **kwargs)

    def get_train_dataloader(self) -> Any:
        return self.loader


def save(root: Path, records: int, block_bytes: int) -> str:
    uri = str(root / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(uri, block_bytes=block_bytes)
    shards = 16
    for s in range(shards):
        n = records // shards
        rows = [{"id": s * n + i, "text": hashlib.sha256(b"%d-%d" % (s, i)).hexdigest() * 3} for i in range(n)]
        saver.save("train", None, rows, shard_id=f"s{s}")
    saver.commit_manifest()
    return uri


def load(uri: str, batch: int, shuffle: bool, window: int = WIDE) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UngatedDataWarning)
        factory = TrainVault().ungated_loader_factory(
            uri,
            collate_fn=to_inputs,
            shuffle=shuffle,
            seed=1,
            dataloader_args={"batch_size": batch},
            observe=Observability(window_steps=window),
        )
    return factory.load("train")


def read_bytes(loader: Any) -> int:
    return int(loader.figures()["window"]["bytes"])


def train(uri: str, batch: int, shuffle: bool, out: Path, save_steps: int, resume: str | None = None) -> int:
    loader = load(uri, batch, shuffle)
    args = TrainingArguments(
        output_dir=str(out),
        num_train_epochs=1,
        gradient_accumulation_steps=GA,
        save_strategy="steps",
        save_steps=save_steps,
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    LoaderTrainer(model=Model(), args=args, loader=loader).train(resume_from_checkpoint=resume)
    return read_bytes(loader)


def measure(uri: str, batch: int, shuffle: bool, share: float, out: Path) -> dict[str, int]:
    batches = len(load(uri, batch, shuffle))
    updates = -(-batches // GA)
    at = max(1, int(updates * share))
    fresh = train(uri, batch, shuffle, out / "fresh", save_steps=at)
    resumed = train(uri, batch, shuffle, out / "fresh", save_steps=at, resume=str(out / "fresh" / f"checkpoint-{at}"))
    skip = load(uri, batch, shuffle)
    for _ in skip:  # skip_first_batches' reads: every batch, the first at x GA of them discarded
        pass
    figures = {"at": at, "fresh": fresh, "default skip": read_bytes(skip), "mixin resume": resumed}
    if not shuffle:
        needed = load(uri, batch, shuffle, window=batches - at * GA)
        for _ in needed:
            pass
        figures["needed"] = read_bytes(needed)
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=40_000)
    p.add_argument("--block-bytes", type=int, default=16 * 1024)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--resume-at", type=float, default=0.8, help="share of the epoch's optimizer steps")
    a, _ = p.parse_known_args()  # bench/run.py passes every benchmark the same arguments
    work = Path(tempfile.mkdtemp(prefix="hf-resume-"))
    try:
        uri = save(work / "data", a.records, a.block_bytes)
        print(f"{a.records} records, blocks of {a.block_bytes} B, batch {a.batch_size} x {GA} accumulation steps")
        for shuffle in (False, True):
            r = measure(uri, a.batch_size, shuffle, a.resume_at, work / f"run-{shuffle}")
            print(f"\n{'shuffled (window 16 blocks)' if shuffle else 'manifest order'}: resume at step {r['at']}")
            for name in ("fresh", "default skip", "mixin resume", "needed"):
                if name in r:
                    b = r[name]
                    vs = f"x{b / r['needed']:6.2f} needed" if "needed" in r else " " * 14
                    print(f"  {name:<13} {b / 2**20:9.2f} MiB  {vs}  x{b / r['fresh']:5.2f} fresh")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
