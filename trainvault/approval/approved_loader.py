"""The approved loader factory: the trainvault loader, with every option it has, reading through custody.

It composes a `SplitLoaderFactory` over a `CustodyStorage` (a `ReadableStorage`, not a
`Storage`) and the gate's parsed, pinned `Publication` (no second parse of the manifest or
descriptors), so it keeps the loader's guarantees (an order that does not depend on
`num_workers`: workers form batches and the loader merges them back in sequence) and adds
the approval's: the manifest and descriptors are the bytes the gate hashed, only approved
shards are opened, and every block's SHA-256 is checked before any of its records is decoded.
Its plan is made by `LoaderPlan.create` from the same options the ungated factory takes
(order, ranks, batching, observation), so the two differ only in what they read through.

Like `ApprovedDataset`, it is issued, not built: the constructor raises `TypeError`, its
attributes cannot be replaced (no swapping in another manifest or storage), and it does
not pickle or copy. What crosses into DataLoader workers is the dataset `load` makes:
verified descriptors and an `ApprovedObjects` reader of the approved shards, never a
manifest (see `trainvault.approval.guard`). Records of the bound exclusions are skipped by
the loader itself (``exclude=``), so positions, epochs and resume count only the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainvault.approval.guard import CustodyStorage
from trainvault.approval.resume import resume_across_amendments
from trainvault.errors import CustodyError, SelectionError
from trainvault.loading import LoaderPlan, SplitLoaderFactory
from trainvault.loading.selection import select
from trainvault.publication.manifest import DataManifest
from trainvault.publication.pinned import Publication

if TYPE_CHECKING:
    from trainvault.approval.amendment import AmendmentChain
    from trainvault.approval.revocation import RevocationWatch
    from trainvault.components.materializer import ComponentRangeMaterializer
    from trainvault.contamination.exclusions import Exclusions
    from trainvault.loading.loader import TrainVaultDataLoader
    from trainvault.mixtures import Mixture, MixtureDataLoader


_ISSUE = object()


class ApprovedLoaderFactory:
    """Makes loaders over selections of an approved dataset: ``.load(split, curriculum_stage=...,
    curriculum_stages=[...], infinite_iter=...)`` returns a `TrainVaultDataLoader` (``load_mixture``
    a `MixtureDataLoader`) in the plan's order. With a `materializer`, it batches the
    materializer's logical records (ranges or packed records)."""

    # Set once by _build (through object.__setattr__), never again.
    _factory: SplitLoaderFactory
    _exclusions: Exclusions | None
    _revocations: RevocationWatch | None
    _amendments: AmendmentChain | None
    materializer: ComponentRangeMaterializer | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "ApprovedLoaderFactory cannot be constructed directly; get one from ApprovedDataset.loader_factory()"
        )

    @classmethod
    def _issue(cls, token: object, *args: Any, **options: Any) -> ApprovedLoaderFactory:
        # The token is checked before any argument is looked at.
        if token is not _ISSUE:
            raise TypeError("an ApprovedLoaderFactory is issued by an ApprovedDataset only")
        return cls._build(*args, **options)

    @classmethod
    def _build(
        cls,
        storage: CustodyStorage,
        publication: Publication,
        *,
        materializer: ComponentRangeMaterializer | None = None,
        exclusions: Exclusions | None = None,
        revocations: RevocationWatch | None = None,
        amendments: AmendmentChain | None = None,
        **plan_options: Any,
    ) -> ApprovedLoaderFactory:
        if not isinstance(storage, CustodyStorage):
            raise TypeError(f"an approved loader reads through custody, not {type(storage).__name__}")
        if not isinstance(publication, Publication):
            raise TypeError(f"an approved loader reads the gate's Publication, not {type(publication).__name__}")
        if materializer is not None:
            from trainvault.components.materializer import ComponentRangeMaterializer

            if not isinstance(materializer, ComponentRangeMaterializer):
                raise TypeError(f"materializer must come from component_range_materializer(), got {materializer!r}")
            if materializer.manifest_sha256 != publication.sha256:
                raise CustodyError(
                    f"{materializer!r} belongs to data manifest {materializer.manifest_sha256}, this approved loader "
                    f"to {publication.sha256}; make it with this dataset's component_range_materializer()"
                )
        plan = LoaderPlan.create(view=materializer, **plan_options)
        self = object.__new__(cls)
        object.__setattr__(self, "_factory", SplitLoaderFactory(storage, publication, plan))
        object.__setattr__(self, "materializer", materializer)
        object.__setattr__(self, "_exclusions", exclusions)
        object.__setattr__(self, "_revocations", revocations)
        object.__setattr__(self, "_amendments", amendments)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"an ApprovedLoaderFactory is read-only; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"an ApprovedLoaderFactory is read-only; cannot delete {name!r}")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            "an ApprovedLoaderFactory does not pickle or copy: build it from the ApprovedDataset where it is needed"
        )

    def __repr__(self) -> str:
        p = self.plan
        return (
            f"ApprovedLoaderFactory({self.manifest_uri!r}, sha256={self.manifest_sha256}, shuffle={p.shuffle}, "
            f"rank={p.rank}/{p.world_size})"
        )

    # What the gate approved, read-only: the custody storage, the pinned publication, the plan.
    @property
    def storage(self) -> CustodyStorage:
        storage = self._factory.storage
        if not isinstance(storage, CustodyStorage):  # only _build sets it, always to custody
            raise CustodyError("this approved loader lost its custody storage; get a new one from the ApprovedDataset")
        return storage

    @property
    def publication(self) -> Publication:
        return self._factory.publication

    @property
    def manifest(self) -> DataManifest:
        return self._factory.manifest

    @property
    def manifest_uri(self) -> str:
        return self._factory.manifest_uri

    @property
    def manifest_sha256(self) -> str:
        return self._factory.manifest_sha256

    @property
    def plan(self) -> LoaderPlan:
        return self._factory.plan

    def load(
        self,
        split: str,
        curriculum_stage: str | None = None,
        curriculum_stages: Sequence[str] | None = None,
        infinite_iter: bool = False,
    ) -> TrainVaultDataLoader:
        """A `TrainVaultDataLoader` over `split`, one stage or a union of stages (`SplitLoaderFactory.load`),
        reading the approved shards only and never dealing a bound exclusion."""
        if self.materializer is not None and split != self.materializer.split:
            raise SelectionError(
                f"the materializer covers split {self.materializer.split!r}, not {split!r}; make one for {split!r}"
            )
        exclude = self._exclude(split)
        if exclude and self.materializer is not None:
            raise CustodyError(
                f"split {split!r} has excluded records and a component materializer: excluded records are not "
                "skipped under a materializer; approve the split without exclusions to materialise its ranges"
            )
        factory = self._excluding(exclude) if exclude else self._factory
        loader = factory.load(split, curriculum_stage, curriculum_stages, infinite_iter)
        self._watch(loader)
        if self._amendments is not None:
            # A state saved before an amendment resumes, the rest of its epoch re-dealt without what it removed.
            stages = select(self.manifest, split, curriculum_stage, curriculum_stages).stages
            resume_across_amendments(self, self._amendments, loader, split, list(stages) if stages else None)
        return loader

    def load_mixture(self, mixture: Mixture) -> MixtureDataLoader:
        """A mixture DataLoader whose components are stages of an approved split (a stage the
        approval does not hold is a `SelectionError`); bound exclusions are never dealt."""
        from trainvault.mixtures.loader import load_mixture  # imports torch: only a mixture loader needs it

        split = getattr(mixture, "split", None)
        exclude = self._exclude(split) if isinstance(split, str) else None
        loader = load_mixture(self._excluding(exclude) if exclude else self._factory, mixture)
        self._watch(loader)
        return loader

    def _watch(self, loader: TrainVaultDataLoader | MixtureDataLoader) -> None:
        """Make `loader` refuse to resume once a trusted revocation of the approval appears."""
        if self._revocations is not None:
            loader.check_before_resume(self._revocations.check)

    def _exclude(self, split: str, sequence: int | None = None) -> dict[str, frozenset[int]]:
        """Shard key -> record indices of `split` never dealt: the bound exclusions and what the
        amendments (up to amendment `sequence`; default all) remove."""
        ex = self._exclusions
        out = dict(ex.by_shard(split)) if ex is not None else {}
        if self._amendments is not None:
            for key, indices in self._amendments.by_shard(split, sequence).items():
                out[key] = out.get(key, frozenset()) | indices
        return out

    def _factory_at(self, split: str, sequence: int) -> SplitLoaderFactory:
        """The factory of `split` as it was after amendment `sequence` (0: the approval alone). Private:
        it deals records later amendments removed, so only `trainvault.approval.removed_reads` uses
        it, to locate what a run read, with ``read=False``."""
        exclude = self._exclude(split, sequence)
        return self._excluding(exclude) if exclude else self._factory

    def _excluding(self, exclude: Mapping[str, frozenset[int]]) -> SplitLoaderFactory:
        """A factory over the same custody and plan that never deals `exclude`. One per split: a
        shard key names a shard within its split only, so ``exclude=`` is given one split's keys."""
        return SplitLoaderFactory(self.storage, self.publication, self.plan, exclude=dict(exclude))


def issue_loader_factory(storage: CustodyStorage, publication: Publication, **options: Any) -> ApprovedLoaderFactory:
    """The approved loader factory over `storage` and the gate's `publication` (internal:
    `ApprovedDataset.loader_factory` calls it)."""
    return ApprovedLoaderFactory._issue(_ISSUE, storage, publication, **options)
