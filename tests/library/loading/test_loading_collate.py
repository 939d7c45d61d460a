"""The default collate: records with token lists of different lengths batch without a
`collate_fn`, through real DataLoader workers, each ragged field a list of tensors."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from trainvault import ConfigurationError, TrainVault, UngatedDataWarning
from trainvault.loading.collate import collate_records


def records(n: int) -> list[dict[str, object]]:
    return [{"id": f"r{i}", "label": i % 3, "tokens": list(range(i % 5 + 1))} for i in range(n)]


@pytest.mark.parametrize("workers", [0, 2])
def test_ragged_token_lists_batch_without_a_collate_fn(tmp_path: Path, workers: int) -> None:
    uri = str(tmp_path / "ds" / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(uri)
    saver.save("train", None, records(40), shard_id="0")
    saver.commit_manifest()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UngatedDataWarning)
        factory = TrainVault().ungated_loader_factory(
            uri, dataloader_args={"batch_size": 8, "num_workers": workers, "timeout": 120 if workers else 0}
        )
    batches = list(factory.load("train"))
    assert len(batches) == 5
    first = batches[0]
    assert first["id"] == [f"r{i}" for i in range(8)]
    assert torch.equal(first["label"], torch.tensor([i % 3 for i in range(8)]))
    assert [t.tolist() for t in first["tokens"]] == [list(range(i % 5 + 1)) for i in range(8)]


def test_equal_lengths_are_stacked_as_torch_does() -> None:
    batch = collate_records([{"tokens": [1, 2]}, {"tokens": [3, 4]}])
    assert [t.tolist() for t in batch["tokens"]] == [[1, 3], [2, 4]]  # default_collate's transpose, unchanged


def test_records_with_different_fields_are_refused_naming_them() -> None:
    with pytest.raises(ConfigurationError, match=r"different fields \(\['a'\] and \['b'\]\).*collate_fn"):
        collate_records([{"a": [1]}, {"b": [2, 3]}])


def test_ragged_strings_stay_lists() -> None:
    batch = collate_records([{"tags": ["x"]}, {"tags": ["y", "z"]}])
    assert batch["tags"] == [["x"], ["y", "z"]]
