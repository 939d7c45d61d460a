"""LoaderPlan: how a loader orders, deals and batches records, validated once.

A `SplitLoaderFactory` holds one plan and hands it, unchanged, to every dataset it
builds (and a mixture loader to its dataset): the settings travel as one frozen object
instead of a dozen arguments through three constructors. Importing this module does not
import torch; `LoaderPlan.create` asks for it (ranks come from `torch.distributed`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainvault.errors import ConfigurationError
from trainvault.extras import require
from trainvault.loading.collate import collate_records
from trainvault.loading.metrics import Observability
from trainvault.loading.view import RecordView

#: Blocks per shuffle window. A window is decoded whole, so a worker holds about two
#: windows of decoded records (the current one and the one read ahead): with the default
#: 1 MiB blocks, about 2 x 16 MiB of payload plus Python object overhead.
DEFAULT_SHUFFLE_WINDOW_BLOCKS = 16

# Arguments the loader decides itself: batching happens inside the dataset, order is ours.
_REFUSED_ARGS = {
    "shuffle": "pass shuffle= to the loader plan",
    "sampler": "the loader deals records itself",
    "batch_sampler": "the loader forms batches itself; pass batch_size",
    "collate_fn": "pass collate_fn= to the loader plan",
}

Collate = Callable[[list[Any]], Any]

#: What a batch is: "records" (the collate's output) or "columns" (a `ColumnBatch` mapping).
BATCH_FORMATS = ("records", "columns")


@dataclass(frozen=True, eq=False)
class LoaderPlan:
    """Order (`shuffle`, `seed`, `shuffle_window_blocks`), dealing (`rank` of `world_size`),
    batching (`batch_size`, `drop_last`, `collate_fn`, a record `view`, `batch_format`:
    ``"records"`` collated, or ``"columns"``, see `trainvault.loading.columnar`), what is reported
    (`observe`) and the rest of `torch.utils.data.DataLoader`'s arguments (`dataloader_args`:
    never ``batch_size``, ``drop_last``, ``shuffle``, ``sampler``, ``batch_sampler`` or
    ``collate_fn``). Build one with `create`, which takes the DataLoader's arguments as a
    trainer writes them; constructing it directly checks the same rules.
    """

    shuffle: bool = False
    seed: int = 0
    shuffle_window_blocks: int = DEFAULT_SHUFFLE_WINDOW_BLOCKS
    batch_size: int = 1
    drop_last: bool = False
    rank: int = 0
    world_size: int = 1
    collate_fn: Collate | None = None
    view: RecordView | None = None
    observe: Observability = field(default_factory=Observability)
    batch_format: str = "records"
    #: (name, value) pairs, so the plan stays immutable and pickles into workers.
    dataloader_args: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.shuffle, bool):
            raise TypeError(f"shuffle must be True or False, got {self.shuffle!r}")
        if not _is_int(self.seed):
            raise TypeError(f"seed must be an int, got {self.seed!r}")
        if not _is_int(self.shuffle_window_blocks) or self.shuffle_window_blocks < 1:
            raise ConfigurationError(
                f"shuffle_window_blocks must be a positive int, got {self.shuffle_window_blocks!r}"
            )
        if not _is_int(self.batch_size) or self.batch_size < 1:
            raise ConfigurationError(f"batch_size must be a positive int, got {self.batch_size!r}")
        if not isinstance(self.drop_last, bool):
            raise ConfigurationError(f"drop_last must be True or False, got {self.drop_last!r}")
        if not (_is_int(self.world_size) and self.world_size >= 1 and _is_int(self.rank)) or not (
            0 <= self.rank < self.world_size
        ):
            raise ConfigurationError(
                f"need 0 <= rank < world_size, got rank={self.rank!r}, world_size={self.world_size!r}"
            )
        if not isinstance(self.observe, Observability):
            raise ConfigurationError(f"observe must be an Observability, got {type(self.observe).__name__}")
        self._check_batch_format()
        args = dict(self.dataloader_args)
        for name, why in _REFUSED_ARGS.items():
            if name in args:
                raise ConfigurationError(f"dataloader_args[{name!r}] is not accepted: {why}")
        for name in ("batch_size", "drop_last"):
            if name in args:
                raise ConfigurationError(f"dataloader_args[{name!r}] is not accepted: the plan's {name} field holds it")
        if args.get("in_order", True) is not True:
            raise ConfigurationError("dataloader_args['in_order'] must stay True: the loader's order is exact")

    def _check_batch_format(self) -> None:
        if self.batch_format not in BATCH_FORMATS:
            raise ConfigurationError(f"batch_format must be one of {BATCH_FORMATS}, got {self.batch_format!r}")
        if self.batch_format == "columns" and (self.collate_fn is not None or self.view is not None):
            raise ConfigurationError(
                "batch_format='columns' builds the batch itself: it takes no collate_fn and no record view "
                "(materializer); use batch_format='records' for those"
            )

    @classmethod
    def create(
        cls,
        *,
        collate_fn: Collate | None = None,
        dataloader_args: Mapping[str, Any] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle_window_blocks: int | None = None,
        view: RecordView | None = None,
        observe: Observability | None = None,
        batch_format: str = "records",
    ) -> LoaderPlan:
        """A plan from the DataLoader's arguments as a trainer writes them: ``batch_size`` and
        ``drop_last`` inside `dataloader_args` (the loader applies them itself), `rank` and
        `world_size` from `torch.distributed` when it is initialised (given ones must agree),
        `shuffle_window_blocks` None for `DEFAULT_SHUFFLE_WINDOW_BLOCKS`, `batch_format` one of
        `BATCH_FORMATS`."""
        require("torch", "torch")
        require("numpy", "torch")
        if dataloader_args is not None and not isinstance(dataloader_args, Mapping):
            raise ConfigurationError(f"dataloader_args must be a dict, got {type(dataloader_args).__name__}")
        args = dict(dataloader_args or {})
        batch_size = args.pop("batch_size", 1)
        drop_last = bool(args.pop("drop_last", False))
        rank, world_size = _ranks(rank, world_size)
        return cls(
            shuffle=shuffle,
            seed=seed,
            shuffle_window_blocks=DEFAULT_SHUFFLE_WINDOW_BLOCKS
            if shuffle_window_blocks is None
            else shuffle_window_blocks,
            batch_size=batch_size,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            collate_fn=collate_fn,
            view=view,
            observe=Observability() if observe is None else observe,
            dataloader_args=tuple(args.items()),
            batch_format=batch_format,
        )

    def torch_args(self) -> dict[str, Any]:
        """A fresh dict of the arguments `torch.utils.data.DataLoader` gets from the plan."""
        return dict(self.dataloader_args)

    def batch_collate(self) -> Collate:
        """The collate each batch gets: the user's (else `collate_records`), through the view."""
        collate = collate_records if self.collate_fn is None else self.collate_fn
        return collate if self.view is None else self.view.collate(collate)


def _is_int(value: object) -> bool:
    # bool is an int subclass; a flag and a count must not stand in for each other.
    return isinstance(value, int) and not isinstance(value, bool)


def _ranks(rank: int | None, world_size: int | None) -> tuple[int, int]:
    dist = require("torch", "torch").distributed
    if dist.is_available() and dist.is_initialized():
        got: tuple[int, int] = (dist.get_rank(), dist.get_world_size())
        if (rank is not None and rank != got[0]) or (world_size is not None and world_size != got[1]):
            raise ConfigurationError(
                f"rank={rank}, world_size={world_size} contradict torch.distributed (rank {got[0]} of {got[1]})"
            )
        return got
    return (0 if rank is None else rank), (1 if world_size is None else world_size)
