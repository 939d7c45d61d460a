"""The training loader: global order and dealing, the batch-forming dataset, resume state.

Importing this package does not import torch; `SplitDataLoader` asks for it when built.
"""

from trainvault.loading.metrics import Observability
from trainvault.loading.split import DEFAULT_SHUFFLE_WINDOW_BLOCKS, SplitDataLoader
from trainvault.loading.trace import StepTrace, TracedRecord

__all__ = ["DEFAULT_SHUFFLE_WINDOW_BLOCKS", "Observability", "SplitDataLoader", "StepTrace", "TracedRecord"]
