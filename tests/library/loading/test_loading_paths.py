"""The two paths to training data and the loader's plan: the ungated factory says so (a
warning), the approved one does not and is not a kind of the ungated one; both read through
the read-only storage protocol; one frozen `LoaderPlan` reaches every dataset a factory makes."""

from __future__ import annotations

import dataclasses
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data  # the loader's extra: these tests run its DataLoaders

from trainvault import ConfigurationError, TrainVault, UngatedDataWarning
from trainvault.approval.approved_loader import ApprovedLoaderFactory
from trainvault.approval.guard import CustodyStorage
from trainvault.loading import LoaderPlan, Observability, SplitLoaderFactory
from trainvault.storage import Storage
from trainvault.storage.readable import ReadableStorage


@pytest.fixture(scope="module")
def chain_and_approved(build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    chain = build_chain(TrainVault(), str(tmp_path_factory.mktemp("paths")), shards=2, records_per_shard=12)
    return chain, chain.vault.approve_dataset(chain.request())


def ids(loader: Any) -> list[str]:
    return [r["id"] for batch in loader for r in batch]


def test_the_ungated_factory_warns_and_names_the_gated_path(chain_and_approved: Any) -> None:
    chain, _ = chain_and_approved
    with pytest.warns(UngatedDataWarning, match="without the approval gate.*open_approved") as caught:
        factory = chain.vault.ungated_loader_factory(chain.manifest_uri, collate_fn=list)
    assert [w.filename for w in caught] == [__file__]  # points at the caller's line, not the library's
    assert isinstance(factory, SplitLoaderFactory)
    assert ids(factory.load("valid")) == [r["id"] for r in chain.records["valid"]]


def test_the_approved_factory_does_not_warn_and_is_not_an_ungated_one(chain_and_approved: Any) -> None:
    chain, approved = chain_and_approved
    with warnings.catch_warnings():
        warnings.simplefilter("error", UngatedDataWarning)
        factory = approved.loader_factory(collate_fn=list)
        got = ids(factory.load("valid"))
    assert got == [r["id"] for r in chain.records["valid"]]
    assert isinstance(factory, ApprovedLoaderFactory) and not isinstance(factory, SplitLoaderFactory)
    # It composes a factory over custody: the custody storage, never the vault's Storage.
    assert isinstance(factory.storage, CustodyStorage) and not isinstance(factory.storage, Storage)
    assert factory.plan.shuffle is False and factory.manifest_sha256 == chain.refs["data_manifest"].sha256


def test_storage_and_custody_satisfy_the_read_only_protocol(chain_and_approved: Any) -> None:
    chain, approved = chain_and_approved
    assert isinstance(chain.vault.storage, ReadableStorage)
    assert isinstance(approved.custody_storage(), ReadableStorage)
    assert not isinstance(object(), ReadableStorage)


def test_one_frozen_plan_reaches_every_dataset(chain_and_approved: Any) -> None:
    chain, _ = chain_and_approved
    plan = LoaderPlan.create(collate_fn=list, shuffle=True, seed=3, dataloader_args={"batch_size": 4, "timeout": 60})
    assert (plan.batch_size, plan.drop_last, plan.torch_args()) == (4, False, {"timeout": 60})
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.seed = 4
    factory = SplitLoaderFactory(chain.vault.storage, chain.manifest_uri, plan)
    train, valid = factory.load("train"), factory.load("valid")
    assert train.split_dataset.plan is plan and valid.split_dataset.plan is plan
    assert train.state_dict()["seed"] == 3 and train.timeout == 60
    assert isinstance(train, torch.utils.data.DataLoader)
    # What a spawned worker gets: the plan pickles, and equals itself field by field.
    again = pickle.loads(pickle.dumps(plan))
    assert (again.seed, again.batch_size, again.dataloader_args) == (3, 4, (("timeout", 60),))


@pytest.mark.parametrize(
    "fields,match",
    [
        ({"batch_size": 0}, "batch_size must be a positive int"),
        ({"batch_size": True}, "batch_size must be a positive int"),
        ({"rank": 2, "world_size": 2}, "need 0 <= rank < world_size"),
        ({"shuffle_window_blocks": 0}, "shuffle_window_blocks"),
        ({"observe": {"watchdog_s": 5}}, "Observability"),
        ({"dataloader_args": (("batch_size", 4),)}, "the plan's batch_size field"),
        ({"dataloader_args": (("sampler", None),)}, "deals records itself"),
        ({"dataloader_args": (("in_order", False),)}, "in_order"),
    ],
)
def test_a_plan_is_validated_when_it_is_made(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        LoaderPlan(**fields)


def test_a_factory_takes_only_a_plan(chain_and_approved: Any, tmp_path: Path) -> None:
    chain, _ = chain_and_approved
    with pytest.raises(ConfigurationError, match="plan must be a LoaderPlan"):
        SplitLoaderFactory(chain.vault.storage, chain.manifest_uri, {"shuffle": True})
    plan = LoaderPlan.create(observe=Observability(window_steps=7))
    assert SplitLoaderFactory(chain.vault.storage, chain.manifest_uri, plan).plan.observe.window_steps == 7
