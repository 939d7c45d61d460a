"""TrainVault: configuration in; savers, manifests and loaders out."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainvault.errors import ConfigurationError, ManifestError, UngatedDataWarning
from trainvault.formats.blocks import DEFAULT_BLOCK_BYTES
from trainvault.publication.manifest import DataManifest
from trainvault.publication.pinned import Publication
from trainvault.publication.saver import DatasetSaver
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage import Storage, StorageConfig
from trainvault.uris import normalize_uri

if TYPE_CHECKING:
    # Imported on use below, so torch and the extras stay optional.
    from trainvault.approval import ApprovalPolicy, ApprovalRequest, ApprovedDataset, ProducerPins, SigningKey
    from trainvault.approval.amend import WrittenAmendment
    from trainvault.approval.hashing import HashProgress
    from trainvault.approval.oms import WrittenOms
    from trainvault.approval.revoke import WrittenRevocation
    from trainvault.components import Frame
    from trainvault.components.builder import Binding
    from trainvault.contamination import BenchmarkItems, VerifierContract
    from trainvault.loading import Observability, SplitLoaderFactory
    from trainvault.representations import RepresentationExample
    from trainvault.representations.documents import Projection, Teacher
    from trainvault.representations.writer import RepresentationWriter


class TrainVault:
    """The entry point. Create once; it holds configuration, not clients, so it pickles.

    With no arguments it serves local paths, ``file://`` and ``memory://`` URIs; ``s3://``
    URIs use `s3_base_url` (the endpoint of any S3-compatible service), `region` and the
    keys. Credentials never appear in a repr, log line or error message.
    """

    def __init__(
        self,
        s3_base_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        *,
        storage: StorageConfig | None = None,
    ):
        if storage is not None and any(v is not None for v in (s3_base_url, region, access_key_id, secret_access_key)):
            raise ConfigurationError("pass either storage=StorageConfig(...) or the individual settings, not both")
        self.storage_config = storage or StorageConfig(
            s3_base_url=s3_base_url,
            region=region,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
        )
        self.storage = Storage(self.storage_config)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TrainVault:
        """S3 settings from ``TRAINVAULT_S3_URL``, ``TRAINVAULT_S3_REGION``, ``TRAINVAULT_S3_KEY_ID``
        and ``TRAINVAULT_S3_SECRET`` (see `StorageConfig.from_env`); local paths need none."""
        return cls(storage=StorageConfig.from_env(environ))

    def __repr__(self) -> str:
        return f"TrainVault({self.storage_config!r})"

    def __getstate__(self) -> dict[str, object]:
        # The Storage travels too: it tells the new process whether its endpoint has answered.
        return {"storage_config": self.storage_config, "storage": self.storage}

    def __setstate__(self, state: dict[str, object]) -> None:
        config, storage = state["storage_config"], state.get("storage")
        if not isinstance(config, StorageConfig):
            raise TypeError(f"not a pickled TrainVault: storage_config is {type(config).__name__}")
        self.storage_config = config
        self.storage = storage if isinstance(storage, Storage) else Storage(config)

    # -- saving -----------------------------------------------------------------

    def dataset_saver(
        self,
        manifest_uri: str,
        *,
        data_format: str = "msgpack.zst",
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        rehash_reused: bool = True,
    ) -> DatasetSaver:
        """A saver for the publication whose manifest will live at `manifest_uri` (`rehash_reused`: see
        `DatasetSaver`)."""
        return DatasetSaver(
            self.storage, manifest_uri, data_format=data_format, block_bytes=block_bytes, rehash_reused=rehash_reused
        )

    # -- loading ----------------------------------------------------------------

    def ungated_loader_factory(
        self,
        manifest_uri: str,
        *,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        dataloader_args: Mapping[str, Any] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        shuffle_window_blocks: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        observe: Observability | None = None,
        batch_format: str = "records",
    ) -> SplitLoaderFactory:
        """A `SplitLoaderFactory` over the manifest at `manifest_uri`, **without the approval gate**
        (needs the ``torch`` extra). It reads whatever the manifest names: nothing checks that the
        data was scanned or approved, so it warns with `UngatedDataWarning`. Train released models
        through `open_approved` (a signed approval record) instead.

        ``.load(split, curriculum_stage=..., curriculum_stages=[...], infinite_iter=...)``
        returns a DataLoader with ``state_dict()``/``load_state_dict()`` and ``figures()``;
        the options are `LoaderPlan.create`'s, as ``ApprovedDataset.loader_factory`` takes them.
        """
        from trainvault.loading import LoaderPlan, SplitLoaderFactory

        warnings.warn(
            f"reading {manifest_uri} without the approval gate: nothing checked that it was scanned for "
            "contamination or approved; use TrainVault.open_approved to read approved data only",
            UngatedDataWarning,
            stacklevel=2,
        )
        plan = LoaderPlan.create(
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
        return SplitLoaderFactory(self.storage, manifest_uri, plan)

    # -- approval ---------------------------------------------------------------

    def approve(
        self,
        manifest_uri: str,
        *,
        benchmarks: Iterable[BenchmarkItems],
        signing_keys: Sequence[SigningKey | str | bytes] | SigningKey | None = None,
        policy: ApprovalPolicy | None = None,
        contract: VerifierContract | None = None,
        pins: ProducerPins | None = None,
        scanner_key: SigningKey | None = None,
        sidecars: Mapping[str, ObjectRef | Referenced] | None = None,
        release_id: str | None = None,
        release_root: str | None = None,
        contract_uri: str | None = None,
        record_uri: str | None = None,
        provenance: Mapping[str, Any] | None = None,
        progress: Callable[[HashProgress], None] | None = None,
    ) -> ObjectRef:
        """Approve the committed publication at `manifest_uri` in one call: write its chain (scan
        manifest, producer pins, evaluation release of `benchmarks`, verifier contract, report;
        create-only, beside the manifest unless told where), run the gate under `policy`, sign
        the record with `signing_keys` (None: ``$TRAINVAULT_SIGNING_KEY``) and return its
        reference (pin its sha256). Raises `ApprovalError` saying what failed. Each step on its
        own: `trainvault.approval.build_approval_chain`, `approve_dataset`, `write_approval`."""
        from trainvault.approval.approve import approve

        return approve(
            self,
            manifest_uri,
            benchmarks=benchmarks,
            signing_keys=signing_keys,
            policy=policy,
            contract=contract,
            pins=pins,
            scanner_key=scanner_key,
            sidecars=sidecars,
            release_id=release_id,
            release_root=release_root,
            contract_uri=contract_uri,
            record_uri=record_uri,
            provenance=provenance,
            progress=progress,
        )

    def approve_dataset(
        self,
        request: ApprovalRequest | Mapping[str, Any] | str | bytes,
        *,
        policy: ApprovalPolicy | None = None,
        progress: Callable[[HashProgress], None] | None = None,
    ) -> ApprovedDataset:
        """Run the approval gate on `request` (an `ApprovalRequest`, its JSON object or bytes):
        hash every bound artifact and scanned file, check them, and return an `ApprovedDataset`
        or raise `ApprovalError` saying what failed. `policy`: the trainer's `ApprovalPolicy`."""
        from trainvault.approval.gate import approve_dataset

        return approve_dataset(self, request, policy=policy, progress=progress)

    def open_approved(
        self,
        approval_uri: str,
        sha256: str,
        *,
        trusted_keys: Iterable[object],
        threshold: int = 1,
        policy: ApprovalPolicy | None = None,
        audit: bool = False,
        progress: Callable[[HashProgress], None] | None = None,
        revocations: str | Sequence[str] | None = None,
        amendments: str | Sequence[str] | None = None,
    ) -> ApprovedDataset:
        """Verify the signed approval record at `approval_uri` (pinned by `sha256`, signed by at
        least `threshold` of `trusted_keys`) and what it binds under `policy`, reading no shard
        byte (`audit=True`: the full gate again, every byte hashed): the gated path to training
        data (``.loader_factory().load(split)`` on the `ApprovedDataset`). `revocations` (a
        prefix, or revocation files): a revocation there signed like the approval refuses it
        (`RevokedError`), at this open and at every resume of its loaders. `amendments` (a prefix,
        or amendment files): the amended view, whose loaders never deal a removed record
        (`AmendmentError` for a chain that does not hold or removes more than the policy's
        `max_removed_fraction`)."""
        from trainvault.approval.record import open_approved

        return open_approved(
            self,
            approval_uri,
            sha256,
            trusted_keys=trusted_keys,
            threshold=threshold,
            policy=policy,
            audit=audit,
            progress=progress,
            revocations=revocations,
            amendments=amendments,
        )

    def revoke(
        self,
        approval_uri: str,
        *,
        reason: str,
        signing_keys: Sequence[SigningKey | str | bytes] | SigningKey | None = None,
        prefix: str | None = None,
    ) -> WrittenRevocation:
        """Sign and write (create-only) the revocation of the approval record at `approval_uri`
        with `reason`, under `prefix` (default: ``revocations/`` beside the record); a trainer
        that opens it with ``revocations=`` that prefix is refused it from then on."""
        from trainvault.approval.revoke import revoke

        return revoke(self, approval_uri, reason=reason, signing_keys=signing_keys, prefix=prefix)

    def amend(
        self,
        approved: ApprovedDataset,
        removals: Iterable[Mapping[str, Any]],
        *,
        signing_keys: Sequence[SigningKey | str | bytes] | SigningKey | None = None,
        prefix: str | None = None,
    ) -> WrittenAmendment:
        """Sign and write (create-only) the next amendment of `approved` (opened from its record),
        removing `removals` (``split``, ``reason``, optional ``note``, and ``shard`` + ``record_index``
        or ``record_id``), chained to the latest under `prefix` (default: ``amendments/`` beside
        the record); a trainer opening with ``amendments=`` that prefix never deals them."""
        from trainvault.approval.amend import amend

        return amend(self, approved, removals, signing_keys=signing_keys, prefix=prefix)

    def export_oms(self, approved: ApprovedDataset, signing_key: bytes | str, out: str | None = None) -> WrittenOms:
        """Write the OpenSSF Model Signing bundle of `approved` (opened from its signed record):
        its data manifest's folder as `model_signing verify key` checks it, signed with an ECDSA
        key (PEM bytes or a path); see `trainvault.approval.oms.export_oms`."""
        from trainvault.approval.oms import export_oms

        return export_oms(self, approved, signing_key, out)

    # -- component ranges ---------------------------------------------------------

    def build_component_ledger(
        self, manifest_uri: str, *, split: str, declare: Callable[[Mapping[str, Any]], Iterable[Frame]]
    ) -> Binding:
        """Build and write `split`'s component ledger from the committed shards and `declare(record)
        -> [Frame]`; return its `Binding` (bind ``binding.sidecars()`` in the approval request)."""
        from trainvault.components.builder import build_component_ledger

        return build_component_ledger(self.storage, manifest_uri, split=split, declare=declare)

    # -- teacher representations (extra: representation) --------------------------

    def representation_writer(
        self,
        root_uri: str,
        *,
        teacher: Teacher | Mapping[str, Any],
        projection: Projection | Mapping[str, Any],
        layers: Iterable[int],
        state_kinds: Iterable[str],
        part_rows: int = 262_144,
    ) -> RepresentationWriter:
        """A `RepresentationWriter` for a representation publication under the folder `root_uri`."""
        from trainvault.representations.writer import RepresentationWriter

        return RepresentationWriter(
            self.storage,
            root_uri,
            teacher=teacher,
            projection=projection,
            layers=layers,
            state_kinds=state_kinds,
            part_rows=part_rows,
        )

    def iter_representation_examples(
        self,
        manifest_uri: str,
        manifest_sha256: str,
        *,
        split: str,
        sources: Sequence[str],
        per_source_count: int,
        teacher_layer: int,
        state_kind: str,
    ) -> Iterator[RepresentationExample]:
        """Verified `RepresentationExample`s of the publication pinned by `manifest_sha256`: per source
        (in caller order) its first `per_source_count` blocks by ascending block id."""
        from trainvault.representations.loader import iter_representation_examples

        return iter_representation_examples(
            self.storage,
            manifest_uri,
            manifest_sha256,
            split=split,
            sources=sources,
            per_source_count=per_source_count,
            teacher_layer=teacher_layer,
            state_kind=state_kind,
        )

    # -- manifests --------------------------------------------------------------

    def load_manifest(self, uri: str) -> DataManifest:
        """Read and validate a data manifest. Relative shard URIs resolve against its folder."""
        return Publication.load(self.storage, uri).manifest

    def save_manifest(self, uri: str, manifest: DataManifest) -> DataManifest:
        """Write a copy of `manifest` at `uri`, create-only.

        Every shard URI is written absolute, so the copy still reads the original data.
        Writing the same copy again is a no-op; a different manifest there is a `ConflictError`.
        """
        if not isinstance(manifest, DataManifest):
            raise ManifestError(f"save_manifest needs a DataManifest, got {type(manifest).__name__}")
        uri = normalize_uri(uri)
        # Validate the (possibly edited) copy the same way a reader will.
        copy = DataManifest.from_obj(manifest.model_dump(mode="json"), source=uri)
        self.storage.put_create(uri, copy.to_json_bytes())
        return copy


__all__ = ["TrainVault"]
