"""approved_dataset: the gate, run through the library itself, and the signed approval record.

A blocking check gates only its own run, so this asset never trusts one: it builds the
approval request from the digests each stage recorded when it wrote its document (plus
the dataset profile's metrics sidecars, when made for this manifest), and
`approve_dataset` re-reads and re-hashes every bound file and every file the scan
manifest declares, recomputes the verdict and refuses anything that does not hold. Only
then is the DSSE-signed approval record written (create-only, one per run).
"""


import dagster as dg

from assets._common import GROUP, link, upstream
from resources.dataset import DatasetSpec
from resources.storage import ObjectStore


def approval_request(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext):
    """The approval request: the six artifacts by (uri, sha256), as their stages recorded them."""
    from trainvault.approval import ApprovalRequest, ArtifactRef

    manifest = upstream(context, "data_manifest")
    scan = upstream(context, "training_scan")
    release = upstream(context, "evaluation_release")
    report = upstream(context, "contamination_report")
    pins = upstream(context, "producer_pins")
    return ApprovalRequest(
        sidecars=profile_sidecars(context, manifest["sha256"]),
        data_manifest=ArtifactRef(uri=manifest["uri"], sha256=manifest["sha256"]),
        training_scan_manifest=ArtifactRef(uri=scan["uri"], sha256=scan["sha256"]),
        evaluation_release=ArtifactRef(uri=release["uri"], sha256=release["sha256"]),
        contamination_report=ArtifactRef(uri=report["uri"], sha256=report["sha256"]),
        verifier_contract=ArtifactRef(uri=release["contract_uri"], sha256=release["contract_sha256"]),
        producer_pins=ArtifactRef(uri=pins["uri"], sha256=pins["sha256"]),
    )


def profile_sidecars(context, manifest_sha256: str) -> dict:
    """The dataset profile's metrics sidecars, bound too when they were made for this manifest."""
    from trainvault.approval import ArtifactRef

    event = context.instance.get_latest_materialization_event(dg.AssetKey("dataset_profile"))
    if event is None or event.asset_materialization is None:
        return {}
    meta = {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()}
    if meta.get("data_manifest_sha256") != manifest_sha256:
        return {}
    return {name: ArtifactRef(**ref) for name, ref in (meta.get("sidecars") or {}).items()}


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


@dg.asset(
    group_name=GROUP,
    kinds={"python"},
    code_version="1",
    deps=["contamination_report", "data_manifest", "training_scan", "evaluation_release", "producer_pins",
          "dataset_profile"],
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def approved_dataset(context: dg.AssetExecutionContext, store: ObjectStore, dataset: DatasetSpec) -> dg.MaterializeResult:
    from trainvault.approval import ApprovalPolicy
    from trainvault.errors import ApprovalError

    vault = store.vault()
    pub = dataset.publication()
    request = approval_request(context)
    release = upstream(context, "evaluation_release")
    policy = ApprovalPolicy(
        evaluation_release_sha256=release["sha256"], verifier_contract_sha256=release["contract_sha256"]
    )
    try:
        approved = vault.approve_dataset(request, policy=policy)
    except ApprovalError as exc:
        raise dg.Failure(str(exc), metadata={"request": dg.MetadataValue.json(request.model_dump(mode="json"))}) from exc
    summary = approved.summary
    record = write_signed_approval(context, vault, dataset, pub.approval_uri(context.run.run_id), approved)
    return dg.MaterializeResult(
        metadata={
            "version": pub.version,
            "uri": record.uri,
            "open": link(record.uri),
            "sha256": record.sha256,
            "data_manifest_sha256": summary.data_manifest_sha256,
            "shards": summary.shards,
            "dagster/row_count": summary.records,
            "bytes hashed": summary.bytes_hashed,
            "open it (trainer)": dg.MetadataValue.md(
                "```python\n" + trainer_snippet(record.uri, record.sha256, dataset.trusted_keys_path, store) + "\n```"
            ),
            "request": dg.MetadataValue.json(request.model_dump(mode="json")),
        },
        data_version=dg.DataVersion(summary.data_manifest_sha256),
    )


def write_signed_approval(context, vault, dataset: DatasetSpec, uri: str, approved):
    """Sign and write the approval record, with the Dagster run and asset provenance."""
    from trainvault.approval import load_signing_key, write_approval

    key = load_signing_key(dataset.signing_key_path, env=dataset.signing_key_env)
    provenance = {
        "orchestrator": "dagster",
        "dagster_run_id": context.run.run_id,
        "dagster_job": context.job_name,
        "asset": context.asset_key.to_user_string(),
        "code_version": "1",
    }
    return write_approval(vault, uri, approved, signing_keys=key, provenance=provenance)


@dg.asset_check(asset=approved_dataset, blocking=True, description="a trainer can open the approval record with the trusted keys")
def approval_opens(context: dg.AssetCheckExecutionContext, store: ObjectStore, dataset: DatasetSpec) -> dg.AssetCheckResult:
    from trainvault.approval import load_verifying_key

    meta = upstream(context, "approved_dataset")
    keys = [load_verifying_key(dataset.trusted_keys_path)] if dataset.trusted_keys_path else []
    approved = store.vault().open_approved(meta["uri"], meta["sha256"], trusted_keys=keys)
    return dg.AssetCheckResult(
        passed=approved.manifest_sha256 == meta["data_manifest_sha256"],
        metadata={"data_manifest_sha256": approved.manifest_sha256},
    )
