"""PyTorch Lightning on trainvault's loaders, as docs/trainers.md tells it: `train_dataloader`
returns ``factory.load("train")``, the stock mid-epoch `ModelCheckpoint`, a kill, ``fit(ckpt_path=...)``
with another ``num_workers``. Lightning keeps the loader's ``state_dict()`` in its checkpoint, so the
resumed run's batches are the uninterrupted run's, in the first epoch and in the second."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from trainvault import TrainVault, UngatedDataWarning

#: 4 shards x 40 records in batches of 8: 20 steps an epoch, two epochs.
BATCH, STEPS_PER_EPOCH, EPOCHS, EVERY = 8, 20, 2, 6
#: A DataLoader worker that stops answering fails the test after this long instead of hanging it.
WORKER_TIMEOUT_S = 120


class Killed(Exception):
    """Stands for the process dying mid-run: nothing after it is saved."""


def collate(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": [r["id"] for r in records], "x": torch.tensor([float(r["tokens"]) for r in records])}


class Model(pl.LightningModule):
    def __init__(self, loader: Any, kill_at: int | None = None):
        super().__init__()
        self.w = torch.nn.Linear(1, 1)
        self.loader, self.kill_at = loader, kill_at
        self.seen: list[list[str]] = []

    def train_dataloader(self) -> Any:
        return self.loader

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        if self.kill_at is not None and self.global_step == self.kill_at:
            raise Killed
        self.seen.append(list(batch["id"]))
        return self.w(batch["x"].unsqueeze(1) / 100).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(model: Model, out: Path, ckpt_path: str | None = None) -> None:
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        default_root_dir=out,
        callbacks=[ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=EVERY, save_top_k=-1)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, ckpt_path=ckpt_path)


def loaders(kind: str, chain: Any, approved: Any) -> Callable[[int], Any]:
    """``load(num_workers)``: a shuffled train loader, approved or ungated over the same manifest."""

    def load(workers: int) -> Any:
        args = {"batch_size": BATCH, "num_workers": workers, **({"timeout": WORKER_TIMEOUT_S} if workers else {})}
        options = {"collate_fn": collate, "dataloader_args": args, "shuffle": True, "seed": 7}
        if kind == "approved":
            return approved.loader_factory(**options).load("train")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UngatedDataWarning)
            return chain.vault.ungated_loader_factory(chain.manifest_uri, **options).load("train")

    return load


@pytest.fixture(scope="module")
def data(build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    chain = build_chain(TrainVault(), str(tmp_path_factory.mktemp("lightning")), shards=4, records_per_shard=40)
    return chain, chain.vault.approve_dataset(chain.request())


@pytest.fixture(scope="module")
def uninterrupted(data: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list[str]]]:
    runs = {}
    for kind in ("ungated", "approved"):
        model = Model(loaders(kind, *data)(0))
        fit(model, tmp_path_factory.mktemp(f"whole-{kind}"))
        runs[kind] = model.seen
    return runs


@pytest.mark.parametrize("kind", ["ungated", "approved"])
@pytest.mark.parametrize("kill_at", [9, 27], ids=["epoch-1", "epoch-2"])
def test_a_killed_run_resumes_with_the_uninterrupted_batches(
    data: Any, uninterrupted: dict[str, list[list[str]]], tmp_path: Path, kind: str, kill_at: int
) -> None:
    whole = uninterrupted[kind]
    assert len(whole) == EPOCHS * STEPS_PER_EPOCH
    epoch_1, epoch_2 = whole[:STEPS_PER_EPOCH], whole[STEPS_PER_EPOCH:]
    assert epoch_1 != epoch_2 and sorted(i for b in epoch_1 for i in b) == sorted(
        i for b in epoch_2 for i in b
    )  # reshuffled, all once
    load = loaders(kind, *data)
    first = Model(load(0), kill_at=kill_at)
    with pytest.raises(Killed):
        fit(first, tmp_path)
    assert first.seen == whole[:kill_at]
    saved = kill_at // EVERY * EVERY  # the last mid-epoch checkpoint before the kill
    ckpt = tmp_path / "ckpt" / f"epoch={saved // STEPS_PER_EPOCH}-step={saved}.ckpt"
    assert ckpt.is_file(), sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    resumed = Model(load(2))
    fit(resumed, tmp_path / "again", ckpt_path=str(ckpt))
    assert resumed.seen == whole[saved:]
