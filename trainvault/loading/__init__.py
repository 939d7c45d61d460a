"""The training loader: global order and dealing, the batch-forming dataset, resume state.

Importing this package does not import torch; `LoaderPlan.create` asks for it.
`SplitLoaderFactory(storage, manifest, plan).load(split)` returns the DataLoader;
`PositionBudget` counts a training loop's consumed positions against its boundaries;
`TrainVaultTrainerMixin` keeps a Hugging Face Trainer's loader state in its checkpoints.
"""

from trainvault.lazy import lazy_exports
from trainvault.loading.budget import PositionBudget
from trainvault.loading.factory import SplitLoaderFactory
from trainvault.loading.metrics import Observability
from trainvault.loading.plan import LoaderPlan

# The DataLoader subclass needs torch, the Trainer mixin transformers: each loads on first use.
_LAZY = {"TrainVaultDataLoader": "trainvault.loading.loader", "TrainVaultTrainerMixin": "trainvault.loading.hf"}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "LoaderPlan",
    "Observability",
    "PositionBudget",
    "SplitLoaderFactory",
    "TrainVaultDataLoader",
    "TrainVaultTrainerMixin",
]
