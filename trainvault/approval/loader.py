"""The approved loader: the trainvault loader, finite and in manifest order, reading through custody.

It is `SplitDataLoader` over a `CustodyStorage`, so it keeps the loader's guarantees (an
order that does not depend on `num_workers`: workers form batches and the loader merges
them back in sequence) and adds the approval's: the manifest and descriptors are the
bytes the gate hashed, only approved shards are opened, and every block's SHA-256 is
checked before any of its records is decoded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainvault.approval.custody import CustodyStorage
from trainvault.errors import CustodyError
from trainvault.loading import SplitDataLoader


class ApprovedSplitDataLoader(SplitDataLoader):
    """Loads selections of an approved dataset: ``.load(split, curriculum_stage=...,
    curriculum_stages=[...])`` returns a finite DataLoader in manifest order."""

    def __init__(
        self,
        storage: CustodyStorage,
        manifest_uri: str,
        manifest_sha256: str,
        *,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
        dataloader_args: Mapping[str, Any] | None = None,
    ):
        super().__init__(storage, manifest_uri, collate_fn=collate_fn, dataloader_args=dataloader_args,
                         shuffle=False, seed=0)
        if self.manifest_sha256 != manifest_sha256:  # the custody storage serves only the approved bytes
            raise CustodyError(f"{manifest_uri}: the loader did not get the approved manifest bytes")

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
        return super().load(split, curriculum_stage, curriculum_stages, False)
