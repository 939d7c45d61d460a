"""The approved loader: the trainvault loader, finite and in manifest order, reading through custody.

It is `SplitDataLoader` over a `CustodyStore` and the gate's parsed, pinned `Publication`
(no second parse of the manifest or descriptors), so it keeps the loader's guarantees (an
order that does not depend on `num_workers`: workers form batches and the loader merges
them back in sequence) and adds the approval's: the manifest and descriptors are the
bytes the gate hashed, only approved shards are opened, and every block's SHA-256 is
checked before any of its records is decoded.

Like `ApprovedDataset`, it is issued, not built: the constructor raises `TypeError`, its
attributes cannot be replaced (no swapping in another manifest or storage), and it does
not pickle or copy. What crosses into DataLoader workers is the dataset `load` makes:
verified descriptors and an `ApprovedObjects` reader of the approved shards, never a
manifest (see `trainvault.approval.guard`). Records of the bound exclusions are skipped by
the loader itself (``exclude=``), so positions, epochs and resume count only the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainvault.approval.guard import CustodyStore
from trainvault.errors import CustodyError, SelectionError
from trainvault.loading import SplitDataLoader
from trainvault.publication.pinned import Publication

if TYPE_CHECKING:
    from trainvault.components.materializer import ComponentRangeMaterializer
    from trainvault.contamination.exclusions import Exclusions


_ISSUE = object()


class ApprovedSplitDataLoader(SplitDataLoader):
    """Loads selections of an approved dataset: ``.load(split, curriculum_stage=...,
    curriculum_stages=[...])`` returns a finite DataLoader in manifest order. With a
    `materializer`, it batches the materializer's logical records (ranges or packed records)."""

    materializer: ComponentRangeMaterializer | None
    _approved_exclusions: Exclusions | None
    _given_args: dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "ApprovedSplitDataLoader cannot be constructed directly; get one from ApprovedDataset.split_data_loader()"
        )

    @classmethod
    def _issue(cls, token: object, *args: Any, **options: Any) -> ApprovedSplitDataLoader:
        # The token is checked before any argument is looked at.
        if token is not _ISSUE:
            raise TypeError("an ApprovedSplitDataLoader is issued by an ApprovedDataset only")
        return cls._build(*args, **options)

    @classmethod
    def _build(
        cls,
        storage: CustodyStore,
        publication: Publication,
        *,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
        dataloader_args: Mapping[str, Any] | None = None,
        materializer: ComponentRangeMaterializer | None = None,
        exclusions: Exclusions | None = None,
    ) -> ApprovedSplitDataLoader:
        if not isinstance(storage, CustodyStore):
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
        self = object.__new__(cls)
        SplitDataLoader.__init__(
            self,
            storage,
            publication,
            collate_fn=collate_fn,
            dataloader_args=dataloader_args,
            shuffle=False,
            seed=0,
            view=materializer,
        )
        self.materializer = materializer
        self._approved_exclusions = exclusions
        self._given_args = dict(dataloader_args or {})
        object.__setattr__(self, "_sealed", True)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_sealed", False):
            raise AttributeError(f"an ApprovedSplitDataLoader is read-only; cannot set {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"an ApprovedSplitDataLoader is read-only; cannot delete {name!r}")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            "an ApprovedSplitDataLoader does not pickle or copy: build it from the ApprovedDataset where it is needed"
        )

    def __repr__(self) -> str:
        return f"ApprovedSplitDataLoader({self.manifest_uri!r}, sha256={self.manifest_sha256})"

    def load(
        self,
        split: str,
        curriculum_stage: str | None = None,
        curriculum_stages: Sequence[str] | None = None,
        infinite_iter: bool = False,
    ) -> Any:
        """A finite DataLoader over `split`, one stage or a union of stages, in manifest order."""
        if infinite_iter:
            raise SelectionError(
                "an approved dataset loads finitely: infinite_iter=True is not accepted; iterate the loader again "
                "for another epoch"
            )
        if self.materializer is not None and split != self.materializer.split:
            raise SelectionError(
                f"the materializer covers split {self.materializer.split!r}, not {split!r}; make one for {split!r}"
            )
        ex = self._approved_exclusions
        exclude = None if ex is None else ex.by_shard(split)
        if not exclude:
            return super().load(split, curriculum_stage, curriculum_stages, False)
        if self.materializer is not None:
            raise CustodyError(
                f"split {split!r} has excluded records and a component materializer: excluded records are not "
                "skipped under a materializer; approve the split without exclusions to materialise its ranges"
            )
        return self._excluding(split, exclude).load(split, curriculum_stage, curriculum_stages, False)

    def load_mixture(self, mixture: Any) -> Any:
        """A mixture DataLoader whose components are stages of an approved split (a stage the
        approval does not hold is a `SelectionError`); bound exclusions are never dealt."""
        split = getattr(mixture, "split", None)
        ex = self._approved_exclusions
        if ex is None or not isinstance(split, str):
            return super().load_mixture(mixture)
        exclude = ex.by_shard(split)
        if not exclude:
            return super().load_mixture(mixture)
        return self._excluding(split, exclude).load_mixture(mixture)

    def _excluding(self, split: str, exclude: Mapping[str, frozenset[int]]) -> SplitDataLoader:
        """A loader over the same custody that never deals `exclude`. One per split: a shard key
        names a shard within its split only, so the loader's ``exclude=`` is given one split's keys."""
        return SplitDataLoader(
            self.storage,
            self.publication,
            collate_fn=self.collate_fn,
            dataloader_args=self._given_args,
            shuffle=False,
            seed=0,
            exclude=dict(exclude),
        )


def issue_loader(storage: CustodyStore, publication: Publication, **options: Any) -> ApprovedSplitDataLoader:
    """The approved loader over `storage` and the gate's `publication` (internal:
    `ApprovedDataset.split_data_loader` calls it)."""
    return ApprovedSplitDataLoader._issue(_ISSUE, storage, publication, **options)
