"""The public surface: every exported name resolves, and none pulls a heavy dependency."""

from __future__ import annotations

import subprocess
import sys


def test_every_public_name_resolves_without_heavy_imports() -> None:
    code = (
        "import sys, trainvault\n"
        "missing = [n for n in trainvault.__all__ if getattr(trainvault, n, None) is None]\n"
        "heavy = [m for m in ('dagster', 'torch', 'pyarrow', 'safetensors', 'numpy') if m in sys.modules]\n"
        "print(missing, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []"


def test_unknown_name_is_an_attribute_error() -> None:
    import pytest

    import trainvault

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        trainvault.nope  # noqa: B018
