"""Fixtures of the contamination tests: the recall sweep of issue 19 (support.contamination_sweep)."""

from __future__ import annotations

from types import ModuleType

import pytest
from support import contamination_sweep


@pytest.fixture(scope="session")
def recall_sweep() -> ModuleType:
    """support.contamination_sweep: `sweep()`, its perturbation `CLASSES` and `clean_corpus()`."""
    return contamination_sweep
