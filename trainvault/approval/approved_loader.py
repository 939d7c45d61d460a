"""The approved loader: the trainvault loader, finite and in manifest order, reading through custody.

It is `SplitDataLoader` over a `CustodyStorage`, so it keeps the loader's guarantees (an
order that does not depend on `num_workers`: workers form batches and the loader merges
them back in sequence) and adds the approval's: the manifest and descriptors are the
bytes the gate hashed, only approved shards are opened, and every block's SHA-256 is
checked before any of its records is decoded.

Like `ApprovedDataset`, it is issued, not built: the constructor raises `TypeError`, its
attributes cannot be replaced (no swapping in another manifest or storage), and it does
not pickle or copy. What crosses into DataLoader workers is the dataset `load` makes:
verified descriptors and an `ApprovedObjects` reader of the approved shards, never a
manifest (see `trainvault.approval.custody`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainvault.approval.custody import CustodyStorage
from trainvault.errors import CustodyError, SelectionError
from trainvault.loading import SplitDataLoader

if TYPE_CHECKING:
    from trainvault.components.materializer import ComponentRangeMaterializer


_ISSUE = object()


class ApprovedSplitDataLoader(SplitDataLoader):
    """Loads selections of an approved dataset: ``.load(split, curriculum_stage=...,
    curriculum_stages=[...])`` returns a finite DataLoader in manifest order. With a
    `materializer`, it batches the materializer's logical records (ranges or packed records)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "ApprovedSplitDataLoader cannot be constructed directly; get one from ApprovedDataset.split_data_loader()"
        )

    @classmethod
    def _issue(
        cls,
        token: object,
        storage: CustodyStorage,
        manifest_uri: str,
        manifest_sha256: str,
        *,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
        dataloader_args: Mapping[str, Any] | None = None,
        materializer: ComponentRangeMaterializer | None = None,
    ) -> ApprovedSplitDataLoader:
        if token is not _ISSUE:
            raise TypeError("an ApprovedSplitDataLoader is issued by an ApprovedDataset only")
        if not isinstance(storage, CustodyStorage):
            raise TypeError(f"an approved loader reads through custody, not {type(storage).__name__}")
        if materializer is not None:
            from trainvault.components.materializer import ComponentRangeMaterializer

            if not isinstance(materializer, ComponentRangeMaterializer):
                raise TypeError(f"materializer must come from component_range_materializer(), got {materializer!r}")
            if materializer.manifest_sha256 != manifest_sha256:
                raise CustodyError(
                    f"{materializer!r} belongs to data manifest {materializer.manifest_sha256}, this approved loader "
                    f"to {manifest_sha256}; make it with this dataset's component_range_materializer()"
                )
        self = object.__new__(cls)
        SplitDataLoader.__init__(self, storage, manifest_uri, collate_fn=collate_fn, dataloader_args=dataloader_args,
                                 shuffle=False, seed=0, view=materializer)
        if self.manifest_sha256 != manifest_sha256:  # the custody storage serves only the approved bytes
            raise CustodyError(f"{manifest_uri}: the loader did not get the approved manifest bytes")
        self.materializer = materializer
        object.__setattr__(self, "_sealed", True)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_sealed", False):
            raise AttributeError(f"an ApprovedSplitDataLoader is read-only; cannot set {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"an ApprovedSplitDataLoader is read-only; cannot delete {name!r}")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("an ApprovedSplitDataLoader does not pickle or copy: build it from the ApprovedDataset where "
                        "it is needed")

    def __repr__(self) -> str:
        return f"ApprovedSplitDataLoader({self.manifest_uri!r}, sha256={self.manifest_sha256})"

    def load(  # type: ignore[override]
        self,
        split: str,
        curriculum_stage: str | None = None,
        curriculum_stages: Sequence[str] | None = None,
        infinite_iter: bool = False,
    ) -> Any:
        """A finite DataLoader over `split`, one stage or a union of stages, in manifest order."""
        if infinite_iter:
            raise ValueError(
                "an approved dataset loads finitely: infinite_iter=True is not accepted; iterate the loader again "
                "for another epoch"
            )
        if self.materializer is not None and split != self.materializer.split:
            raise SelectionError(
                f"the materializer covers split {self.materializer.split!r}, not {split!r}; make one for {split!r}"
            )
        return super().load(split, curriculum_stage, curriculum_stages, False)


def issue_loader(
    storage: CustodyStorage, manifest_uri: str, manifest_sha256: str, **options: Any
) -> ApprovedSplitDataLoader:
    """The approved loader over `storage` (internal: `ApprovedDataset.split_data_loader` calls it)."""
    return ApprovedSplitDataLoader._issue(_ISSUE, storage, manifest_uri, manifest_sha256, **options)
