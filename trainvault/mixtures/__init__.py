"""Mixtures: a weighted schedule over components of one split, as one resumable DataLoader.

`load_mixture(factory, Mixture(split, [MixtureComponent(name, weight, stage), ...]))`
returns a `MixtureDataLoader` over an ungated `SplitLoaderFactory`; an approved dataset's
``loader_factory().load_mixture(mixture)`` is the same loader reading through custody.
This package sits above `trainvault.loading` (it deals each component by the loader's
order and reads it through the loader factory's `select_blocks`); `loading` never imports it.
Importing it does not import torch: `load_mixture` and `MixtureDataLoader` load on first use.
"""

from importlib import import_module
from typing import Any

from trainvault.mixtures.spec import Mixture, MixtureComponent

_LAZY = {"load_mixture": "trainvault.mixtures.loader", "MixtureDataLoader": "trainvault.mixtures.loader"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trainvault.mixtures' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["Mixture", "MixtureComponent", "MixtureDataLoader", "load_mixture"]
