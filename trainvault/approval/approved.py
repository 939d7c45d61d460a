"""ApprovedDataset: custody of a dataset that passed the gate.

Only the gate makes one (the constructor raises `TypeError`). It is immutable: the
manifest it hands out is a detached deep copy, its bindings are a read-only mapping of
frozen references, and it does not pickle (custody does not travel; open the approval
again in the other process).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainvault.approval.guard import CustodyStorage, issue_custody
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage import StorageConfig

if TYPE_CHECKING:
    from trainvault.approval.amendment import AmendmentChain
    from trainvault.approval.approved_loader import ApprovedLoaderFactory
    from trainvault.approval.removed_reads import RemovedRead
    from trainvault.approval.request import ApprovalRequest
    from trainvault.approval.result import GateResult, VerificationSummary
    from trainvault.approval.revocation import RevocationWatch
    from trainvault.contamination.exclusions import Exclusions
    from trainvault.contamination.report import ContaminationReport
    from trainvault.loading.metrics import Observability
    from trainvault.publication.manifest import DataManifest
    from trainvault.refs import ObjectRef

_ISSUE = object()


@dataclass(frozen=True)
class ApprovalRecordRef(Referenced):
    """The signed approval record a dataset was opened from: its reference, signers and provenance."""

    signers: tuple[str, ...]
    provenance: Mapping[str, Any] = field(default_factory=dict)


class ApprovedDataset:
    """A dataset that passed the approval gate; build its loaders with `loader_factory`."""

    __slots__ = ("_amendments", "_bindings", "_config", "_record", "_result", "_revocations")
    _bindings: Mapping[str, ObjectRef]
    _config: StorageConfig
    _record: ApprovalRecordRef | None
    _result: GateResult
    _revocations: RevocationWatch | None
    _amendments: AmendmentChain | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "ApprovedDataset cannot be constructed directly; get one from TrainVault.approve_dataset(request) or "
            "TrainVault.open_approved(approval_uri, sha256, trusted_keys=...)"
        )

    @classmethod
    def _issue(
        cls,
        token: object,
        result: GateResult,
        config: StorageConfig,
        record: ApprovalRecordRef | None = None,
        revocations: RevocationWatch | None = None,
        amendments: AmendmentChain | None = None,
    ) -> ApprovedDataset:
        if token is not _ISSUE:
            raise TypeError("ApprovedDataset is issued by the approval gate only")
        self = object.__new__(cls)
        object.__setattr__(self, "_result", result)
        object.__setattr__(self, "_config", config)
        object.__setattr__(self, "_record", record)
        object.__setattr__(self, "_revocations", revocations)
        object.__setattr__(self, "_amendments", amendments)
        object.__setattr__(self, "_bindings", result.request.bindings())
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ApprovedDataset is read-only; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"ApprovedDataset is read-only; cannot delete {name!r}")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("an ApprovedDataset does not pickle or copy: open the approval again where it is needed")

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"ApprovedDataset({self.manifest_uri!r}, sha256={self.manifest_sha256}, shards={s.shards}, "
            f"records={s.records})"
        )

    # -- what was approved ----------------------------------------------------------

    @property
    def manifest(self) -> DataManifest:
        """A detached deep copy of the approved manifest (shard URIs absolute): editing it changes nothing here."""
        return self._result.publication.manifest.model_copy(deep=True)

    @property
    def manifest_uri(self) -> str:
        return self._result.publication.uri

    @property
    def manifest_sha256(self) -> str:
        return self._result.request.data_manifest.sha256

    @property
    def manifest_size(self) -> int:
        """Bytes of the data manifest the gate hashed."""
        return len(self._result.publication.raw)

    @property
    def bindings(self) -> Mapping[str, ObjectRef]:
        """Every binding the gate checked, by name: a read-only mapping of frozen references."""
        return self._bindings

    @property
    def request(self) -> ApprovalRequest:
        """A copy of the request that was approved."""
        return self._result.request.model_copy(deep=True)

    @property
    def report(self) -> ContaminationReport:
        """A copy of the contamination report the gate judged."""
        return self._result.report.model_copy(deep=True)

    @property
    def exclusions(self) -> Exclusions | None:
        """A copy of the bound exclusions (records the loader skips), or None when none are bound."""
        ex = self._result.exclusions
        return None if ex is None else ex.model_copy(deep=True)

    @property
    def amendments(self) -> AmendmentChain | None:
        """The checked amendments this dataset was opened with (its loaders never deal what they
        remove), or None."""
        return self._amendments

    @property
    def summary(self) -> VerificationSummary:
        return self._result.summary

    @property
    def approval(self) -> ApprovalRecordRef | None:
        """The signed record this dataset was opened from (None when approved in this process)."""
        return self._record

    # -- reading --------------------------------------------------------------------

    def custody_storage(self) -> CustodyStorage:
        """A read-only storage serving the approved manifest and descriptors and the approved shards only."""
        r = self._result
        return issue_custody(self._config, r.shard_sizes, {r.publication.uri: r.publication.raw}, r.descriptors_raw)

    def loader_factory(
        self,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
        dataloader_args: Mapping[str, Any] | None = None,
        *,
        shuffle: bool = False,
        seed: int = 0,
        shuffle_window_blocks: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        observe: Observability | None = None,
        materializer: Any = None,
        batch_format: str = "records",
    ) -> ApprovedLoaderFactory:
        """The factory of this dataset's loaders (needs the ``torch`` extra), with the options of
        `TrainVault.ungated_loader_factory` (`LoaderPlan.create`: order, ranks from
        `torch.distributed` when initialised, batching, observation): ``.load(split)`` returns a
        DataLoader that reads the approved shards only, verifies every block before yielding its
        records and never deals a record of the bound exclusions; opened with ``revocations=``, its
        loaders check them again at every resume. With a `materializer` (from
        `component_range_materializer`) it batches its logical records; with
        ``batch_format="columns"``, batches are columns (`trainvault.loading.columnar`)."""
        from trainvault.approval.approved_loader import issue_loader_factory

        return issue_loader_factory(
            self.custody_storage(),
            self._result.publication,
            materializer=materializer,
            exclusions=self._result.exclusions,
            revocations=self._revocations,
            amendments=self._amendments,
            collate_fn=collate_fn,
            dataloader_args=dataloader_args,
            shuffle=shuffle,
            seed=seed,
            shuffle_window_blocks=shuffle_window_blocks,
            rank=rank,
            world_size=world_size,
            observe=observe,
            batch_format=batch_format,
        )

    def removed_reads(self, state: Mapping[str, Any]) -> list[RemovedRead]:
        """The records that the run which saved loader `state` read, at which step and rank, that
        this dataset's amendments (``open_approved(..., amendments=...)``) removed after the view
        the run read, each with its reason: computed from the state alone, no record read."""
        from trainvault.approval.removed_reads import removed_reads

        return removed_reads(self.loader_factory, self._amendments, state)

    def component_range_materializer(self, split: str, *, mode: str = "unpack", max_rows: int | None = None) -> Any:
        """The `ComponentRangeMaterializer` of `split`'s component ledger, which this approval must
        bind as a sidecar (`ApprovalError` if not); the gate checked it against every token.
        `mode`: ``"unpack"`` (one record per range) or ``"group"`` (one per packed record);
        a range of more than `max_rows` rows is a `ManifestError`."""
        from trainvault.components.materializer import open_materializer

        return open_materializer(
            checked=self._result.ledgers.get(split),
            custody=self.custody_storage(),
            manifest=self._result.publication.manifest,
            manifest_sha256=self.manifest_sha256,
            split=split,
            mode=mode,
            max_rows=max_rows,
        )


def issue(
    result: GateResult,
    config: StorageConfig,
    record: ApprovalRecordRef | None = None,
    *,
    revocations: RevocationWatch | None = None,
    amendments: AmendmentChain | None = None,
) -> ApprovedDataset:
    """Make the `ApprovedDataset` for a gate result (internal to trainvault.approval); its loaders
    run `revocations`' check at every resume and never deal what `amendments` remove."""
    return ApprovedDataset._issue(_ISSUE, result, config, record, revocations, amendments)


__all__ = ["ApprovalRecordRef", "ApprovedDataset"]
