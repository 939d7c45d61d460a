"""What trainvault deals one rank, read without a trainer: the expected side of the trainer tests."""

from __future__ import annotations

from trainvault import TrainVault
from trainvault.loading import LoaderPlan, SplitLoaderFactory


def dealt_ids(manifest: str, rank: int, *, seed: int, world_size: int = 2, batch_size: int = 5) -> list[list[str]]:
    """Two shuffled epochs of record ids, batch by batch, that `rank` of `world_size` is dealt."""
    plan = LoaderPlan.create(
        collate_fn=lambda rs: [r["id"] for r in rs],
        dataloader_args={"batch_size": batch_size},
        shuffle=True,
        seed=seed,
        rank=rank,
        world_size=world_size,
    )
    loader = SplitLoaderFactory(TrainVault().storage, manifest, plan).load("train")
    return list(loader) + list(loader)
