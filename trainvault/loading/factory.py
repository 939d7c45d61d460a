"""SplitLoaderFactory: one publication, one `LoaderPlan`; `load` makes the DataLoaders.

It is not itself a DataLoader: each ``load(split, ...)`` returns a `TrainVaultDataLoader`
over that selection. `select_blocks` is the one way from a selection to what a loader
deals from (its blocks, their fetcher, the order key): `load` uses it, and so does a
mixture loader (`trainvault.mixtures`, a layer above) for each component. It reads through
any `ReadableStorage` and opens no approval: data read this way is whatever the manifest
names. A trainer that must read only approved data uses `ApprovedDataset.loader_factory`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainvault.errors import ConfigurationError, SelectionError, StorageError
from trainvault.extras import require
from trainvault.loading.descriptors import SelectedDescriptors
from trainvault.loading.exclusions import check_exclude
from trainvault.loading.plan import LoaderPlan
from trainvault.loading.selection import Selection, select
from trainvault.publication.manifest import ShardDescriptor, ShardEntry
from trainvault.publication.pinned import Publication
from trainvault.publication.reader import read_descriptor
from trainvault.storage.readable import ReadableStorage

if TYPE_CHECKING:
    from trainvault.loading.fetch import BlockFetcher
    from trainvault.loading.loader import TrainVaultDataLoader
    from trainvault.loading.order import BlockPlan

_DESCRIPTOR_THREADS = 16


@dataclass(frozen=True)
class SelectedBlocks:
    """A selection read down to what a loader deals from: its blocks (record counts, after
    exclusions), the fetcher that reads and verifies them, the key of its order, and the
    digest of its excluded records (None without exclusions)."""

    selection: Selection
    blocks: BlockPlan
    fetcher: BlockFetcher
    order_key: int
    exclude_sha256: str | None


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


class SplitLoaderFactory:
    """Makes DataLoaders over selections of one manifest that resume exactly and elastically.

    `manifest_uri`: the manifest's URI, or a `Publication` already read (its attached
    descriptors are used as they are; else its descriptor pack is read). `plan`: order,
    dealing and batching (`LoaderPlan`; default: ``LoaderPlan.create()``). `exclude`: manifest
    shard key -> 0-based record indices in that shard that are never dealt (every position,
    epoch length and the resume state count the remaining records).
    """

    def __init__(
        self,
        storage: ReadableStorage,
        manifest_uri: str | Publication,
        plan: LoaderPlan | None = None,
        *,
        exclude: Mapping[str, Collection[int]] | None = None,
    ):
        require("torch", "torch")  # a plan built directly has not asked yet
        plan = LoaderPlan.create() if plan is None else plan
        if not isinstance(plan, LoaderPlan):
            raise ConfigurationError(f"plan must be a LoaderPlan, got {type(plan).__name__}")
        self.storage = storage
        self.plan = plan
        publication = manifest_uri if isinstance(manifest_uri, Publication) else Publication.load(storage, manifest_uri)
        # One read for every descriptor (a manifest written before packs: each is read on first use).
        self.publication = publication.read_pack(storage)
        self.manifest_uri = self.publication.uri
        self.manifest_sha256 = self.publication.sha256
        self.manifest = self.publication.manifest
        if exclude is not None and plan.view is not None:
            raise ConfigurationError(
                "exclude and a record view (materializer) cannot be combined: a view counts logical records, "
                "exclusions count stored ones"
            )
        self.exclusions = check_exclude(exclude, self.manifest)
        # Descriptors read one by one (a manifest without a pack), by shard URI.
        self._descriptors: dict[str, ShardDescriptor] = {}

    def __repr__(self) -> str:
        p = self.plan
        return f"SplitLoaderFactory({self.manifest_uri!r}, shuffle={p.shuffle}, rank={p.rank}/{p.world_size})"

    def read_descriptors(self, shards: Sequence[ShardEntry]) -> SelectedDescriptors:
        """The descriptors of `shards` (from the pack, else read once and kept)."""
        attached = self.publication.descriptors
        todo = [s for s in shards if s.descriptor_uri not in attached and s.uri not in self._descriptors]
        if todo:
            with ThreadPoolExecutor(max_workers=_DESCRIPTOR_THREADS) as pool:
                for s, d in zip(todo, pool.map(lambda e: read_descriptor(self.storage, e), todo), strict=False):
                    self._descriptors[s.uri] = d
        read = {s.uri: self._descriptors[s.uri] for s in shards if s.uri in self._descriptors}
        return SelectedDescriptors(tuple(shards), attached, read)

    def block_plan(self, shards: Sequence[ShardEntry], descriptors: SelectedDescriptors) -> BlockPlan:
        """The `BlockPlan` of the selected shards: every block's shard, index and record count."""
        from trainvault.loading.order import block_plan, packed_block_plan

        view = self.plan.view
        packed = descriptors.packed()
        if packed is not None and view is None and self.exclusions is None:
            return packed_block_plan(*packed.columns([s.descriptor_uri for s in shards]))
        blocks = []
        for i in range(len(shards)):
            counts = descriptors.block_counts(i)
            if view is not None:
                # With a view, positions count its logical records (from its own counts, no data read).
                logical = view.block_counts(shards[i], descriptors[i])
                counts = [(first, logical[j]) for j, (first, _) in enumerate(counts)]
            blocks.append(counts)
        excluded = None if self.exclusions is None else self.exclusions.for_shards(tuple(shards))
        return block_plan(blocks, excluded)

    def select_blocks(
        self, split: str, curriculum_stage: str | None = None, curriculum_stages: Sequence[str] | None = None
    ) -> SelectedBlocks:
        """`split`'s selection (one stage or a union of stages) read to its blocks and fetcher."""
        from trainvault.loading.fetch import BlockFetcher
        from trainvault.loading.order import derive_key

        p = self.plan
        selection = select(self.manifest, split, curriculum_stage, curriculum_stages)
        descriptors = self.read_descriptors(selection.shards)
        return SelectedBlocks(
            selection=selection,
            blocks=self.block_plan(selection.shards, descriptors),
            fetcher=BlockFetcher(self.storage, self.manifest.data_format, selection.shards, descriptors),
            order_key=derive_key(self.manifest_sha256, selection.sha256, p.seed, p.shuffle_window_blocks),
            exclude_sha256=None if self.exclusions is None else self.exclusions.sha256(selection.shards),
        )

    def load(
        self,
        split: str,
        curriculum_stage: str | None = None,
        curriculum_stages: Sequence[str] | None = None,
        infinite_iter: bool = False,
    ) -> TrainVaultDataLoader:
        """A `TrainVaultDataLoader` over `split`, one stage or a union of stages."""
        from trainvault.loading.iterable import SplitIterableDataset
        from trainvault.loading.loader import TrainVaultDataLoader
        from trainvault.loading.state import OrderIdentity

        p = self.plan
        chosen = self.select_blocks(split, curriculum_stage, curriculum_stages)
        selection, blocks = chosen.selection, chosen.blocks
        if infinite_iter and blocks.total_records == 0:
            raise SelectionError(f"{selection.describe()} holds no records; an infinite loader would never yield")
        if infinite_iter and p.drop_last and blocks.total_records < p.batch_size * p.world_size:
            raise SelectionError(
                f"{selection.describe()} holds {blocks.total_records} records, fewer than one round of batch_size "
                f"{p.batch_size} x world_size {p.world_size}: drop_last drops them all, so an infinite loader "
                "would never yield; use drop_last=False or a smaller batch_size"
            )
        identity = OrderIdentity(
            manifest_sha256=self.manifest_sha256,
            split=split,
            curriculum_stages=selection.stages,
            selection_sha256=selection.sha256,
            shuffle=p.shuffle,
            seed=p.seed,
            shuffle_window_blocks=p.shuffle_window_blocks,
            view_sha256=None if p.view is None else p.view.view_sha256,
            exclude_sha256=chosen.exclude_sha256,
        )
        dataset = SplitIterableDataset(
            fetcher=chosen.fetcher, blocks=blocks, order_key=chosen.order_key, plan=p, infinite=bool(infinite_iter)
        )
        args = self.dataloader_args([s.uri for s in selection.shards])
        return TrainVaultDataLoader(dataset, identity, manifest_uri=self.manifest_uri, **args)

    def dataloader_args(self, uris: Sequence[str]) -> dict[str, Any]:
        """The plan's `torch.utils.data.DataLoader` arguments for a loader reading `uris` (with
        the workers' multiprocessing context chosen for where those shards live)."""
        args = self.plan.torch_args()
        if args.get("num_workers", 0):
            args["multiprocessing_context"] = _worker_context(args.get("multiprocessing_context"), uris)
        return args
