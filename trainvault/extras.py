"""Optional dependencies: imported on first use, with an error that names the extra."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str) -> ModuleType:
    """Import `module`, or raise ImportError telling how to install `trainvault[extra]`."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{module} is needed for this feature; install it with: pip install 'trainvault[{extra}]'"
        ) from exc
