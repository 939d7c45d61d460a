"""approved_dataset: the gate, run through the library itself, and the signed approval record.

A blocking check gates only its own run, so this asset never trusts one: it builds the
approval request from the hand-offs of its own run's stages (manifest, scan, release and
contract, report, pins, and the profile's metrics sidecars), and `approve_dataset`
re-reads and re-hashes every bound file and every file the scan manifest declares,
recomputes the verdict and refuses anything that does not hold. Only then is the
DSSE-signed approval record written, create-only and named by the request's digest: the
same inputs approved again reuse the record already there (after opening it with the
trusted keys) instead of adding another.
"""


import dagster as dg

from assets._common import APPROVE, asset_args, ins, object_metadata
from resources.dataset import DatasetSpec
from resources.handoff import Handoff
from resources.storage import ObjectStore
from trainvault.canonical import canonical_json, sha256_hex

DESCRIPTION = ("The signed (DSSE, Ed25519) approval record: the library's gate re-hashes every bound document "
               "and shard and recomputes the verdict first; what a trainer opens by URI and SHA-256.")
INPUTS = ("data_manifest", "training_scan", "evaluation_release", "contamination_report", "producer_pins",
          "dataset_profile")


def approval_request(data_manifest: Handoff, training_scan: Handoff, evaluation_release: Handoff,
                     contamination_report: Handoff, producer_pins: Handoff, dataset_profile: Handoff):
    """The approval request: the six artifacts and the profile's sidecars, as this run's stages handed them off."""
    from trainvault.approval import ApprovalRequest, ArtifactRef

    def ref(h) -> ArtifactRef:
        return ArtifactRef(uri=h.uri, sha256=h.sha256)

    sidecars = dataset_profile.also if dataset_profile.ref == data_manifest.ref else {}
    return ApprovalRequest(
        sidecars={name: ref(r) for name, r in sidecars.items()},
        data_manifest=ref(data_manifest.ref),
        training_scan_manifest=ref(training_scan.ref),
        evaluation_release=ref(evaluation_release.ref),
        contamination_report=ref(contamination_report.ref),
        verifier_contract=ref(evaluation_release.also["contract"]),
        producer_pins=ref(producer_pins.ref),
    )


def trainer_snippet(uri: str, sha256: str, trusted_keys_path: str | None, store: ObjectStore | None = None) -> str:
    """The lines a trainer pastes to open this approval (credentials from its own environment)."""
    key = repr(trusted_keys_path or "approver.pub")
    vault = "TrainVault()"
    imports = "from trainvault import TrainVault\n"
    if store is not None and store.s3_base_url:
        imports = "import os\n" + imports
        vault = (f"TrainVault(s3_base_url={store.s3_base_url!r}, region={store.region!r}, "
                 "access_key_id=os.environ['TRAINVAULT_S3_KEY_ID'], secret_access_key=os.environ['TRAINVAULT_S3_SECRET'])")
    return (
        imports
        + "from trainvault.approval import load_verifying_key\n"
        + f"approved = {vault}.open_approved(\n    {uri!r},\n    {sha256!r},\n"
        + f"    trusted_keys=[load_verifying_key({key})],\n)\n"
        + "loader = approved.split_data_loader(collate_fn=list, dataloader_args={'batch_size': 8}).load('train')"
    )


def trusted_keys(spec: DatasetSpec) -> list:
    from trainvault.approval import load_verifying_key

    return [load_verifying_key(spec.trusted_keys_path)] if spec.trusted_keys_path else []


def signed_approval(context, vault, spec: DatasetSpec, uri: str, approved):
    """The approval record at `uri`: the one already there when it opens for the same manifest, else
    signed now (with the Dagster run and asset as provenance) and written create-only."""
    from trainvault.approval import load_signing_key, write_approval
    from trainvault.refs import ObjectRef

    if vault.storage.exists(uri):
        sha256 = sha256_hex(vault.storage.get(uri))
        existing = vault.open_approved(uri, sha256, trusted_keys=trusted_keys(spec))
        if existing.manifest_sha256 != approved.summary.data_manifest_sha256:
            raise dg.Failure(f"{uri} approves manifest {existing.manifest_sha256}, not "
                             f"{approved.summary.data_manifest_sha256}: the record is not this request's")
        return ObjectRef(uri=uri, sha256=sha256), False
    key = load_signing_key(spec.signing_key_path, env=spec.signing_key_env)
    provenance = {
        "orchestrator": "dagster",
        "dagster_run_id": context.run.run_id,
        "dagster_job": context.job_name,
        "asset": context.asset_key.to_user_string(),
        "code_version": context.assets_def.code_versions_by_key[context.asset_key] or "",
    }
    record = write_approval(vault, uri, approved, signing_keys=key, provenance=provenance)
    return ObjectRef(uri=record.uri, sha256=record.sha256), True


def build_approved_dataset(spec: DatasetSpec) -> dg.AssetsDefinition:
    @dg.asset(**asset_args(spec, "approved_dataset", APPROVE, DESCRIPTION, "pytorch"), ins=ins(spec, *INPUTS))
    def approved_dataset(context: dg.AssetExecutionContext, store: ObjectStore, data_manifest: Handoff,
                         training_scan: Handoff, evaluation_release: Handoff, contamination_report: Handoff,
                         producer_pins: Handoff, dataset_profile: Handoff) -> dg.Output[Handoff]:
        from trainvault.approval import ApprovalPolicy
        from trainvault.errors import ApprovalError

        vault = store.vault()
        pub = spec.publication_at(data_manifest.publication_version)
        request = approval_request(data_manifest, training_scan, evaluation_release, contamination_report,
                                   producer_pins, dataset_profile)
        policy = ApprovalPolicy(evaluation_release_sha256=evaluation_release.ref.sha256,
                                verifier_contract_sha256=evaluation_release.also["contract"].sha256)
        try:
            approved = vault.approve_dataset(request, policy=policy)
        except ApprovalError as exc:
            raise dg.Failure(str(exc), metadata={"request": dg.MetadataValue.json(request.model_dump(mode="json"))}) from exc
        summary = approved.summary
        request_sha256 = sha256_hex(canonical_json(request.model_dump(mode="json")))
        record, written = signed_approval(context, vault, spec, pub.approval_uri(request_sha256), approved)
        return dg.Output(
            Handoff.of(pub, "approved_dataset", record.uri, record.sha256, data_manifest=data_manifest.ref),
            metadata={
                **object_metadata(record.uri, record.sha256, pub.version),
                "written": written,
                "data_manifest_sha256": summary.data_manifest_sha256,
                "shards": summary.shards,
                "dagster/row_count": summary.records,
                "bytes hashed": summary.bytes_hashed,
                "open it (trainer)": dg.MetadataValue.md(
                    "```python\n" + trainer_snippet(record.uri, record.sha256, spec.trusted_keys_path, store) + "\n```"
                ),
                "request": dg.MetadataValue.json(request.model_dump(mode="json")),
            },
            data_version=dg.DataVersion(summary.data_manifest_sha256),
        )

    return approved_dataset


def build_approval_opens(spec: DatasetSpec, approval_asset: dg.AssetsDefinition) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=approval_asset, blocking=True, name="approval_opens",
                    description="a trainer can open the approval record with the trusted keys")
    def approval_opens(context: dg.AssetCheckExecutionContext, store: ObjectStore, approval: Handoff) -> dg.AssetCheckResult:
        approved = store.vault().open_approved(approval.ref.uri, approval.ref.sha256, trusted_keys=trusted_keys(spec))
        return dg.AssetCheckResult(
            passed=approved.manifest_sha256 == approval.also["data_manifest"].sha256,
            metadata={"data_manifest_sha256": approved.manifest_sha256},
        )

    return approval_opens
