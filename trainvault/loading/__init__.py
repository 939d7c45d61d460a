"""The training loader: global order and dealing, the batch-forming dataset, resume state.

Importing this package does not import torch; `LoaderPlan.create` asks for it.
`SplitLoaderFactory(storage, manifest, plan).load(split)` returns the DataLoader;
`PositionBudget` counts a training loop's consumed positions against its boundaries.
"""

from trainvault.loading.budget import Boundary, PositionBudget
from trainvault.loading.factory import SelectedBlocks, SplitLoaderFactory
from trainvault.loading.metrics import Observability
from trainvault.loading.plan import DEFAULT_SHUFFLE_WINDOW_BLOCKS, LoaderPlan
from trainvault.loading.trace import StepTrace, TracedRecord

__all__ = [
    "DEFAULT_SHUFFLE_WINDOW_BLOCKS",
    "Boundary",
    "LoaderPlan",
    "Observability",
    "PositionBudget",
    "SelectedBlocks",
    "SplitLoaderFactory",
    "StepTrace",
    "TracedRecord",
]
