"""What trainers call on the loader besides iteration: ``set_epoch``, ``state_dict(step=...)``
for a trainer that fetched ahead, and the refusal of a DataLoader rebuilt over ``loader.dataset``."""

from __future__ import annotations

from typing import Any

import pytest
import torch.utils.data

from trainvault import TrainVault
from trainvault.errors import ConfigurationError, ResumeStateError
from trainvault.loading import LoaderPlan, SplitLoaderFactory

WORKER_TIMEOUT_S = 120


def ids(records: list[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in records]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("hooks") / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(uri, block_bytes=64)
    for s in range(3):
        saver.save("train", None, [{"id": s * 20 + i} for i in range(20)], shard_id=f"s{s}")
    saver.commit_manifest()
    return uri


def load(manifest: str, workers: int = 0) -> Any:
    args = {"batch_size": 4, "num_workers": workers, **({"timeout": WORKER_TIMEOUT_S} if workers else {})}
    plan = LoaderPlan.create(collate_fn=ids, dataloader_args=args, shuffle=True, seed=11)
    return SplitLoaderFactory(TrainVault().storage, manifest, plan).load("train")


def test_set_epoch_starts_that_epoch_and_checks_a_restored_state(manifest: str) -> None:
    loader = load(manifest)
    epochs = [list(loader), list(loader), list(loader)]
    assert epochs[0] != epochs[1] != epochs[2]
    jumped = load(manifest)
    jumped.set_epoch(2)
    assert list(jumped) == epochs[2]
    jumped.set_epoch(1)  # back again: set_epoch names the epoch, whatever ran before
    assert list(jumped) == epochs[1]

    partial = load(manifest)
    it = iter(partial)
    head = [next(it) for _ in range(6)]
    state = partial.state_dict()
    resumed = load(manifest, workers=2)
    resumed.load_state_dict(state)
    with pytest.raises(ResumeStateError, match="restored loader state is in epoch 0, the trainer starts epoch 1"):
        resumed.set_epoch(1)
    resumed.set_epoch(0)  # the restored epoch: the resume stands
    assert head + list(resumed) == epochs[0]
    for bad in (-1, "1", True, 1.0):
        with pytest.raises(ConfigurationError, match="set_epoch takes an int >= 0"):
            resumed.set_epoch(bad)


def test_state_dict_at_an_earlier_step_resumes_there(manifest: str) -> None:
    loader = load(manifest)
    whole = list(loader) + list(loader)  # 15 batches an epoch, two epochs
    run = load(manifest)
    it = iter(run)
    taken = [next(it) for _ in range(6)]
    at_6 = run.state_dict()
    taken += [next(it) for _ in range(6)]
    assert run.state_dict(step=6) == at_6  # what the state was when 6 batches were received
    assert run.state_dict(step=12) == run.state_dict()
    resumed = load(manifest)
    resumed.load_state_dict(run.state_dict(step=6))
    assert list(resumed) == whole[6:15]
    for bad in (13, -1, "6"):
        with pytest.raises(ResumeStateError, match="a state is taken at a step from 0"):
            run.state_dict(step=bad)  # type: ignore[arg-type]
    assert taken == whole[:12]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataloader_rebuilt_over_the_dataset_is_refused(manifest: str, workers: int) -> None:
    loader = load(manifest, workers)
    first = next(iter(loader))
    assert len(first) == 4
    # What accelerate's skip_first_batches does: a plain DataLoader over loader.dataset.
    rebuilt = torch.utils.data.DataLoader(
        loader.dataset, batch_size=None, num_workers=workers, **({"timeout": WORKER_TIMEOUT_S} if workers else {})
    )
    with pytest.raises(ConfigurationError, match="iterated by a DataLoader other than its TrainVaultDataLoader"):
        next(iter(rebuilt))
    assert len(list(loader)) == 15  # the loader itself still iterates: the next epoch, whole
