"""Fixtures of the library's tests: the custody chain builder (support.approval_chain), the
loopback fault proxy (support.faultproxy), packed component records and rollout samples."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from support import approval_chain, faultproxy, rollout_samples
from support import packed_records as packed_records_module


@pytest.fixture(scope="session")
def build_chain() -> Callable[..., approval_chain.Chain]:
    """`build_chain(vault, root, ...)`: a whole custody chain on a real store (support.approval_chain)."""
    return approval_chain.build_chain


@pytest.fixture(scope="session")
def make_records() -> Callable[..., list[dict[str, Any]]]:
    """`make_records(shard, n, contaminate=False)`: the chain's deterministic records."""
    return approval_chain.make_records


@pytest.fixture(scope="session")
def eval_items() -> list[dict[str, str]]:
    """The chain's evaluation items (a copy: a test may change it)."""
    return [dict(item) for item in approval_chain.ITEMS]


@pytest.fixture(scope="session")
def unpacked_manifest() -> Callable[[Any], bytes]:
    """`unpacked_manifest(saver)`: the saver's manifest bytes without a descriptor pack."""
    return approval_chain.unpacked_manifest


@pytest.fixture(scope="session")
def faults() -> ModuleType:
    """support.faultproxy: `faults.FaultProxy(port)` between trainvault and S3, armed with `faults.Rule`s."""
    return faultproxy


@pytest.fixture(scope="session")
def packed_records() -> ModuleType:
    """support.packed_records: packed long-context records (`shard_records`) and their `declare`."""
    return packed_records_module


@pytest.fixture(scope="session")
def make_samples() -> Callable[..., list[dict[str, Any]]]:
    """`make_samples(n, seed=0, ...)`: rollout samples as a trainer hands them to an archive."""
    return rollout_samples.make_samples
