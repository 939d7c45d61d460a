"""Mixtures: a weighted schedule over components of one split, as one resumable DataLoader.

`load_mixture(factory, Mixture(split, [MixtureComponent(name, weight, stage), ...]))`
returns a `MixtureDataLoader` over an ungated `SplitLoaderFactory`; an approved dataset's
``loader_factory().load_mixture(mixture)`` is the same loader reading through custody.
This package sits above `trainvault.loading` (it deals each component by the loader's
order and reads it through the loader factory's `select_blocks`); `loading` never imports it.
Importing it does not import torch: `load_mixture` and `MixtureDataLoader` load on first use.
"""

from trainvault.lazy import lazy_exports
from trainvault.mixtures.spec import Mixture, MixtureComponent

_LAZY = {
    "load_mixture": "trainvault.mixtures.loader",
    "MixtureDataLoader": "trainvault.mixtures.loader",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "Mixture",
    "MixtureComponent",
    "MixtureDataLoader",
    "load_mixture",
]
