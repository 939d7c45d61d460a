"""Fixtures of the bad-input walks: support.bad_input as `bad` (strategies, `outcome`, `refused`),
and its hypothesis settings registered as the profile `bad-input` (used with
``@settings(parent=settings.get_profile("bad-input"))``)."""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import settings
from support import bad_input

settings.register_profile("bad-input", bad_input.CHECK)


@pytest.fixture(scope="session")
def bad() -> ModuleType:
    """support.bad_input: the property every walk checks and the strategies it walks."""
    return bad_input
