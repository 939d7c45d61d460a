"""SplitDataLoader: one manifest, one order configuration; `load` makes DataLoaders."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trainvault.errors import ConfigurationError, SelectionError, StorageError
from trainvault.extras import require
from trainvault.loading.exclusions import check_exclude
from trainvault.loading.metrics import Observability
from trainvault.loading.view import RecordView
from trainvault.publication.manifest import ShardDescriptor, ShardEntry
from trainvault.publication.pinned import Publication
from trainvault.publication.reader import read_descriptor
from trainvault.storage import ReadableStorage

#: Blocks per shuffle window. A window is decoded whole, so a worker holds about two
#: windows of decoded records (the current one and the one read ahead): with the default
#: 1 MiB blocks, about 2 x 16 MiB of payload plus Python object overhead.
DEFAULT_SHUFFLE_WINDOW_BLOCKS = 16

# Arguments the loader decides itself: batching happens inside the dataset, order is ours.
_REFUSED_ARGS = {
    "shuffle": "pass shuffle= to split_data_loader",
    "sampler": "the loader deals records itself",
    "batch_sampler": "the loader forms batches itself; pass batch_size",
    "collate_fn": "pass collate_fn= to split_data_loader",
}
_DESCRIPTOR_THREADS = 16


def _worker_context(requested: Any, uris: Sequence[str]) -> Any:
    """The multiprocessing context for workers: what the user asked for, else ``fork`` when
    every shard is a local file (plain file I/O survives fork, and forked workers start at
    once), else ``forkserver``. memory:// shards cannot be read by workers at all.

    obstore's I/O runtime (S3) does not survive ``fork()`` in a process that has used it,
    so a forked worker would fail on its first read: object-store shards need a worker that
    starts clean. The forkserver forks from a clean process that has preloaded torch and
    trainvault, so each worker still starts quickly.
    """
    import multiprocessing

    if any(uri.startswith("memory:") for uri in uris):
        # A memory:// store exists in one process only: a worker would see another store.
        raise StorageError(
            "memory:// stores live inside one process, so DataLoader workers cannot read them: "
            "use num_workers=0, or save the dataset to a local folder or S3"
        )
    if requested is not None:
        return requested
    if all(uri.startswith(("file:", "/")) for uri in uris):
        return multiprocessing.get_context("fork")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "trainvault.loading.iterable"])
    return ctx


class SplitDataLoader:
    """Loads selections of one manifest as DataLoaders that resume exactly and elastically.

    `dataloader_args` go to `torch.utils.data.DataLoader`, except ``batch_size`` and
    ``drop_last``, which the loader applies itself. `rank` and `world_size` are taken from
    `torch.distributed` when it is initialised. `view` (a `RecordView`): batch its logical
    records of each block instead of the stored records. `manifest_uri`: the manifest's URI, or a
    `Publication` already read (its attached descriptors are used as they are; else its
    descriptor pack is read). `exclude`: manifest shard key -> 0-based record indices in that
    shard that are never dealt (every position, epoch length and the resume state count the
    remaining records). `observe`: the window of the per-step figures, the slowest-rank gather
    and the watchdog (`Observability`).
    """

    def __init__(
        self,
        storage: ReadableStorage,
        manifest_uri: str | Publication,
        *,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
        dataloader_args: Mapping[str, Any] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle_window_blocks: int = DEFAULT_SHUFFLE_WINDOW_BLOCKS,
        view: RecordView | None = None,
        exclude: Mapping[str, Collection[int]] | None = None,
        observe: Observability | None = None,
    ):
        self._torch = require("torch", "torch")
        require("numpy", "torch")
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be True or False, got {shuffle!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {seed!r}")
        if not isinstance(shuffle_window_blocks, int) or shuffle_window_blocks < 1:
            raise ConfigurationError(f"shuffle_window_blocks must be a positive int, got {shuffle_window_blocks!r}")
        self.storage = storage
        self.collate_fn = collate_fn
        self.shuffle = shuffle
        self.seed = seed
        self.shuffle_window_blocks = shuffle_window_blocks
        self.view = view
        if observe is not None and not isinstance(observe, Observability):
            raise ConfigurationError(f"observe must be an Observability, got {type(observe).__name__}")
        self.observe = observe or Observability()
        self.rank, self.world_size = self._ranks(rank, world_size)
        self._args = dict(dataloader_args or {})
        for name, why in _REFUSED_ARGS.items():
            if name in self._args:
                raise ConfigurationError(f"dataloader_args[{name!r}] is not accepted: {why}")
        if self._args.get("in_order", True) is not True:
            raise ConfigurationError("dataloader_args['in_order'] must stay True: the loader's order is exact")
        self.batch_size = self._args.pop("batch_size", 1)
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise ConfigurationError(f"batch_size must be a positive int, got {self.batch_size!r}")
        self.drop_last = bool(self._args.pop("drop_last", False))

        publication = manifest_uri if isinstance(manifest_uri, Publication) else Publication.load(storage, manifest_uri)
        # One read for every descriptor (a manifest written before packs: each is read on first use).
        self.publication = publication.read_pack(storage)
        self.manifest_uri = self.publication.uri
        self.manifest_sha256 = self.publication.sha256
        self.manifest = self.publication.manifest
        if exclude is not None and view is not None:
            raise ConfigurationError(
                "exclude and a record view (materializer) cannot be combined: a view counts logical records, "
                "exclusions count stored ones"
            )
        self.exclusions = check_exclude(exclude, self.manifest)
        self._descriptors: dict[str, ShardDescriptor] = {
            e.uri: self.publication.descriptors[e.descriptor_uri]
            for _, e in self.publication.entries()
            if e.descriptor_uri in self.publication.descriptors
        }

    def __repr__(self) -> str:
        return f"SplitDataLoader({self.manifest_uri!r}, shuffle={self.shuffle}, rank={self.rank}/{self.world_size})"

    def _ranks(self, rank: int | None, world_size: int | None) -> tuple[int, int]:
        dist = self._torch.distributed
        if dist.is_available() and dist.is_initialized():
            got = dist.get_rank(), dist.get_world_size()
            if (rank is not None and rank != got[0]) or (world_size is not None and world_size != got[1]):
                raise ConfigurationError(
                    f"rank={rank}, world_size={world_size} contradict torch.distributed (rank {got[0]} of {got[1]})"
                )
            return got
        rank = 0 if rank is None else rank
        world_size = 1 if world_size is None else world_size
        if not isinstance(world_size, int) or world_size < 1 or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ConfigurationError(f"need 0 <= rank < world_size, got rank={rank!r}, world_size={world_size!r}")
        return rank, world_size

    def _read_descriptors(self, shards: Sequence[ShardEntry]) -> tuple[ShardDescriptor, ...]:
        todo = [s for s in shards if s.uri not in self._descriptors]
        if todo:
            with ThreadPoolExecutor(max_workers=_DESCRIPTOR_THREADS) as pool:
                for s, d in zip(todo, pool.map(lambda e: read_descriptor(self.storage, e), todo), strict=False):
                    self._descriptors[s.uri] = d
        return tuple(self._descriptors[s.uri] for s in shards)

    def _plan(self, shards: Sequence[ShardEntry], descriptors: Sequence[ShardDescriptor]) -> Any:
        """The `BlockPlan` of the selected shards: every block's shard, index and record count."""
        from trainvault.loading.order import block_plan

        blocks = []
        for i, desc in enumerate(descriptors):
            # With a view, positions count its logical records (from its own counts, no data read).
            logical = None if self.view is None else self.view.block_counts(shards[i], desc)
            blocks.append(
                [(b.first_record, b.record_count if logical is None else logical[j]) for j, b in enumerate(desc.blocks)]
            )
        excluded = None if self.exclusions is None else self.exclusions.for_shards(tuple(shards))
        return block_plan(blocks, excluded)

    def load(
        self,
        split: str,
        curriculum_stage: str | None = None,
        curriculum_stages: Sequence[str] | None = None,
        infinite_iter: bool = False,
    ) -> Any:
        """A DataLoader (a `TrainVaultDataLoader`) over `split`, one stage or a union of stages."""

        from trainvault.loading.iterable import SplitIterableDataset
        from trainvault.loading.loader import TrainVaultDataLoader
        from trainvault.loading.order import derive_key
        from trainvault.loading.selection import select
        from trainvault.loading.state import OrderIdentity

        selection = select(self.manifest, split, curriculum_stage, curriculum_stages)
        descriptors = self._read_descriptors(selection.shards)
        plan = self._plan(selection.shards, descriptors)
        if infinite_iter and plan.total_records == 0:
            raise SelectionError(f"{selection.describe()} holds no records; an infinite loader would never yield")
        if infinite_iter and self.drop_last and plan.total_records < self.batch_size * self.world_size:
            raise SelectionError(
                f"{selection.describe()} holds {plan.total_records} records, fewer than one round of batch_size "
                f"{self.batch_size} x world_size {self.world_size}: drop_last drops them all, so an infinite loader "
                "would never yield; use drop_last=False or a smaller batch_size"
            )
        identity = OrderIdentity(
            manifest_sha256=self.manifest_sha256,
            split=split,
            curriculum_stages=selection.stages,
            selection_sha256=selection.sha256,
            shuffle=self.shuffle,
            seed=self.seed,
            shuffle_window_blocks=self.shuffle_window_blocks,
            view_sha256=None if self.view is None else self.view.view_sha256,
            exclude_sha256=None if self.exclusions is None else self.exclusions.sha256(selection.shards),
        )
        collate = self.collate_fn or self._torch.utils.data.default_collate
        if self.view is not None:
            collate = self.view.collate(collate)
        dataset = SplitIterableDataset(
            storage=self.storage,
            data_format=self.manifest.data_format,
            shards=selection.shards,
            descriptors=descriptors,
            plan=plan,
            order_key=derive_key(self.manifest_sha256, selection.sha256, self.seed, self.shuffle_window_blocks),
            shuffle=self.shuffle,
            window_blocks=self.shuffle_window_blocks,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            rank=self.rank,
            world_size=self.world_size,
            collate_fn=collate,
            infinite=bool(infinite_iter),
            view=self.view,
            watchdog_s=self.observe.watchdog_s,
            on_stall=self.observe.on_stall,
        )
        args = dict(self._args)
        if args.get("num_workers", 0):
            args["multiprocessing_context"] = _worker_context(
                args.get("multiprocessing_context"), [s.uri for s in selection.shards]
            )
        return TrainVaultDataLoader(dataset, identity, manifest_uri=self.manifest_uri, observe=self.observe, **args)

    def load_mixture(self, mixture: Any) -> Any:
        """A `MixtureDataLoader` drawing batches from `mixture`'s components (stages of its split)."""
        from trainvault.loading.mixture_loader import MixtureDataLoader

        args = dict(self._args)
        if args.get("num_workers", 0):
            uris = [e.uri for _, e in self.publication.entries()]
            args["multiprocessing_context"] = _worker_context(args.get("multiprocessing_context"), uris)
        return MixtureDataLoader(self, mixture, **args)
