"""approved_dataset: the gate, run through the library itself, the signed approval record
and its Croissant card.

A blocking check gates only its own run, so this asset never trusts one: it builds the
approval request from the hand-offs of its own run's stages (manifest, signed scan,
release and contract, signed report, pins, the profile's metrics sidecars and, where the
policy allows them, the exclusions), and `approve_dataset` under the dataset's policy
(trusted scanner keys, re-scan sample, exclusions) re-reads and re-hashes every bound
file and every file the scan manifest declares, checks the scanner's signatures,
re-scans a sample of shards, recomputes the verdict and refuses anything that does not
hold. Only then is the DSSE-signed approval record written, create-only and named by the
request's digest: the same inputs approved again reuse the record already there. The
gate runs once per approval here: the record is then verified as a trainer verifies it
(pinned digest, trusted keys) and must carry the request the gate just judged
(`trainvault.approval.with_record`, no second hash pass); the Croissant card is written
from that, and the blocking check `approval_opens` is reported by this step. A trainer's
open checks the record and every document it binds at the cost of its metadata (see
docs/approval.md, "Opening an approval"); `audit=True` runs this gate again.
"""

import shlex
from collections.abc import Iterator

import dagster as dg

from assets._common import APPROVE, Metadata, asset_args, ins, key, link, object_metadata, table
from assets.current import current_approval, observe_blocked
from assets.verified import surveys_of
from resources.dataset import DatasetSpec, VersionLayout
from resources.handoff import Handoff
from resources.storage import StorageResource
from trainvault import ApprovalRequest, ApprovedDataset, ObjectNotFoundError, ObjectRef, TrainVault
from trainvault.approval import ApprovalPolicy, VerifyingKey, load_verifying_key
from trainvault.canonical import canonical_json, sha256_hex

DESCRIPTION = (
    "The signed (DSSE, Ed25519) approval record: the library's gate re-hashes every bound document "
    "and shard and recomputes the verdict first; what a trainer opens by URI and SHA-256."
)
INPUTS = (
    "data_manifest",
    "training_scan",
    "evaluation_release",
    "contamination_report",
    "producer_pins",
    "dataset_profile",
)
EXCLUSIONS = "contamination_exclusions"
OPENS = "approval_opens"
OPENS_DESCRIPTION = (
    "a trainer can open the approval record with the trusted keys: it is signed by them and carries "
    "the request the gate judged under the dataset's policy"
)


def approval_request(
    data_manifest: Handoff,
    training_scan: Handoff,
    evaluation_release: Handoff,
    contamination_report: Handoff,
    producer_pins: Handoff,
    dataset_profile: Handoff,
    contamination_exclusions: Handoff | None = None,
) -> ApprovalRequest:
    """The approval request: the six artifacts of the chain (`trainvault.approval.ApprovalChain`), the
    profile's sidecars and the exclusions (if any), as this run's stages handed them off."""
    from trainvault.approval import ApprovalChain
    from trainvault.contamination import EXCLUSIONS_SIDECAR

    def ref(h: ObjectRef) -> ObjectRef:
        return ObjectRef(uri=h.uri, sha256=h.sha256)

    sidecars = dict(dataset_profile.also) if dataset_profile.ref == data_manifest.ref else {}
    if contamination_exclusions is not None:
        sidecars[EXCLUSIONS_SIDECAR] = contamination_exclusions.ref
    chain = ApprovalChain(
        data_manifest=ref(data_manifest.ref),
        training_scan_manifest=ref(training_scan.ref),
        evaluation_release=ref(evaluation_release.ref),
        verifier_contract=ref(evaluation_release.also["contract"]),
        producer_pins=ref(producer_pins.ref),
        contamination_report=ref(contamination_report.ref),
    )
    return chain.request(sidecars={name: ref(r) for name, r in sidecars.items()})


def trainer_snippet(
    uri: str, sha256: str, spec: DatasetSpec, store: StorageResource | None = None, exclusions: bool = False
) -> str:
    """The lines a trainer pastes to open this approval (credentials from its own environment)."""
    key = repr(spec.trusted_keys_path or "approver.pub")
    vault = "TrainVault()"
    imports = "from trainvault import TrainVault\n"
    if store is not None and store.s3_base_url:
        imports = "import os\n" + imports
        vault = (
            f"TrainVault(s3_base_url={store.s3_base_url!r}, region={store.region!r}, "
            "access_key_id=os.environ['TRAINVAULT_S3_KEY_ID'], secret_access_key=os.environ['TRAINVAULT_S3_SECRET'])"
        )
    return (
        imports
        + "from trainvault.approval import ApprovalPolicy, load_verifying_key\n"
        + f"approved = {vault}.open_approved(\n    {uri!r},\n    {sha256!r},\n"
        + f"    trusted_keys=[load_verifying_key({key})],\n    policy={policy_snippet(spec, exclusions)},\n)\n"
        + "loader = approved.loader_factory(collate_fn=list, dataloader_args={'batch_size': 8}).load('train')"
    )


def trainer_policy(spec: DatasetSpec, exclusions: bool) -> tuple[ApprovalPolicy, list[str]]:
    """The `ApprovalPolicy` a trainer of this dataset passes (`exclusions`: the approval binds some) and
    the files of its scanner keys: the one policy the snippet and the trace command both write out."""
    paths = spec.scanner_key_paths()
    approver = spec.policy.approval_policy([load_verifying_key(p) for p in paths])
    default = ApprovalPolicy()
    # The open holds the trainer's re-scan depth against the approver's: ask for what the approver did.
    scanner = (approver.scanner_threshold, approver.rescan_min_shards, approver.rescan_fraction)
    if not paths:
        scanner = (default.scanner_threshold, default.rescan_min_shards, default.rescan_fraction)
    policy = ApprovalPolicy(
        scanner_keys=approver.scanner_keys,
        scanner_threshold=scanner[0],
        rescan_min_shards=scanner[1],
        rescan_fraction=scanner[2],
        allow_exclusions=exclusions,
        max_excluded_fraction=approver.max_excluded_fraction if exclusions else default.max_excluded_fraction,
        unscanned_fields=approver.unscanned_fields,
    )
    return policy, paths


def policy_snippet(spec: DatasetSpec, exclusions: bool) -> str:
    """The `ApprovalPolicy` a trainer passes for this dataset, as Python source."""
    policy, paths = trainer_policy(spec, exclusions)
    return policy.python_source(paths)


def trace_command(
    uri: str, sha256: str, spec: DatasetSpec, *, exclusions: bool, batch_size: int, stages: list[str] | None
) -> str:
    """The ``trainvault trace`` command for step 0 of a run over the approval's train split."""
    words = ["trainvault", "trace", uri, "--sha256", sha256, "--trusted-key", spec.trusted_keys_path or "approver.pub"]
    policy, paths = trainer_policy(spec, exclusions)
    words += policy.cli_words(paths)
    words += [
        "--batch-size",
        str(batch_size),
        *[w for s in stages or [] for w in ("--stage", s)],
        "--step",
        "0",
        "--records",
    ]
    return " ".join(shlex.quote(w) for w in words)


def trusted_keys(spec: DatasetSpec) -> list[VerifyingKey]:
    return [load_verifying_key(spec.trusted_keys_path)] if spec.trusted_keys_path else []


def stored_ref(vault: TrainVault, uri: str) -> ObjectRef | None:
    """The object already at `uri` (read once: its bytes give the sha256), or None."""
    try:
        data = vault.storage.get(uri)
    except ObjectNotFoundError:
        return None
    return ObjectRef(uri=uri, sha256=sha256_hex(data))


def signed_approval(
    context: dg.AssetExecutionContext, vault: TrainVault, spec: DatasetSpec, uri: str, approved: ApprovedDataset
) -> tuple[ObjectRef, bool]:
    """The approval record at `uri` (named by the request's digest: the one already there is
    reused, and opened after), else signed now (with the Dagster run and asset as provenance)
    and written create-only."""
    from trainvault.approval import load_signing_key, write_approval

    if (existing := stored_ref(vault, uri)) is not None:
        return existing, False
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


def opened_as_trainer(
    vault: TrainVault, spec: DatasetSpec, record: ObjectRef, approved: ApprovedDataset
) -> ApprovedDataset:
    """`approved` as a trainer opens its record (signed by the trusted keys, carrying the request the
    gate just judged under the dataset's policy), without running the gate a second time."""
    from trainvault.approval import with_record

    return with_record(vault, approved, record.uri, record.sha256, trusted_keys=trusted_keys(spec))


def croissant_card(
    vault: TrainVault, spec: DatasetSpec, layout: VersionLayout, opened: ApprovedDataset, request_sha256: str
) -> tuple[ObjectRef, bool]:
    """The approval's Croissant card: the one already there (named by the request's digest) once its
    clean copies match their digests (one that differs is written again), else written."""
    from trainvault.cards import reuse_croissant, write_croissant
    from trainvault.verification import shard_field_surveys

    uri = layout.croissant_uri(request_sha256)
    if stored_ref(vault, uri) is not None:
        reused, rewritten = reuse_croissant(vault, opened, uri)
        return ObjectRef(uri=reused.uri, sha256=reused.sha256), rewritten
    # The field survey of every approved shard from the verification pass (stored by content), not a re-read.
    surveys = shard_field_surveys(surveys_of(vault.storage, spec, opened.manifest))
    card = write_croissant(
        vault,
        opened,
        uri,
        name=spec.name,
        description=spec.description or None,
        version=layout.version,
        surveys=surveys,
    )
    return ObjectRef(uri=card.uri, sha256=card.sha256), True


def oms_signature(vault: TrainVault, spec: DatasetSpec, opened: ApprovedDataset) -> Metadata:
    """With the spec's OMS key: the OpenSSF Model Signing bundle of the data folder beside the approval
    (deterministic: a rebuild writes the same bytes, so nothing), as metadata with the command that
    verifies it; without one, nothing."""
    if not spec.oms_key_path:
        return {}
    oms = vault.export_oms(opened, spec.oms_key_path)
    path = spec.oms_key_path
    public = path[: -len(".key")] + ".pub" if path.endswith(".key") else "OMS_KEY.pub"
    folder, bundle = (u.removeprefix("file://") for u in (oms.root, oms.uri))
    verify = ["model_signing", "verify", "key", folder, "--signature", bundle, "--public_key", public]
    return {"oms signature": link(oms.uri), "verify it (model_signing)": dg.MetadataValue.md(f"`{shlex.join(verify)}`")}


def build_approved_dataset(spec: DatasetSpec) -> dg.AssetsDefinition:
    inputs = (*INPUTS, EXCLUSIONS) if spec.policy.allow_exclusions else INPUTS

    asset_key = key(spec, "approved_dataset")

    @dg.asset(
        **asset_args(spec, "approved_dataset", APPROVE, DESCRIPTION, "pytorch"),
        ins=ins(spec, *inputs),
        check_specs=[dg.AssetCheckSpec(OPENS, asset=asset_key, blocking=True, description=OPENS_DESCRIPTION)],
    )
    def approved_dataset(
        context: dg.AssetExecutionContext, store: StorageResource, **handoffs: Handoff
    ) -> Iterator[dg.Output[Handoff] | dg.AssetCheckResult]:
        from trainvault import ApprovalError

        vault = store.vault()
        manifest, release = handoffs["data_manifest"], handoffs["evaluation_release"]
        layout = spec.layout_at(manifest.publication_version)
        if EXCLUSIONS in handoffs and not excluded_records(vault, handoffs[EXCLUSIONS]):
            del handoffs[EXCLUSIONS]  # nothing to exclude: the approval binds none, any trainer's policy opens it
        request = approval_request(**handoffs)
        policy = spec.approval_policy(release.ref.sha256, release.also["contract"].sha256)
        try:
            approved = vault.approve_dataset(request, policy=policy)
        except ApprovalError as exc:
            observe_blocked(context.op_execution_context, spec, f"the gate refused the approval: {exc}")
            raise dg.Failure(
                str(exc),
                metadata={
                    "request": dg.MetadataValue.json(request.model_dump(mode="json")),
                    **current_approval(context.instance, context.asset_key),
                },
            ) from exc
        summary = approved.summary
        request_sha256 = sha256_hex(canonical_json(request.model_dump(mode="json")))
        record, written = signed_approval(context, vault, spec, layout.approval_uri(request_sha256), approved)
        opened = opened_as_trainer(vault, spec, record, approved)
        card, card_written = croissant_card(vault, spec, layout, opened, request_sha256)
        yield dg.Output(
            Handoff.of(
                layout,
                "approved_dataset",
                record.uri,
                record.sha256,
                data_manifest=manifest.ref,
                evaluation_release=release.ref,
                contract=release.also["contract"],
            ),
            metadata={
                **object_metadata(record.uri, record.sha256, layout.version),
                "written": written,
                "data_manifest_sha256": summary.data_manifest_sha256,
                "shards": summary.shards,
                # What the trainer gets: the excluded records are in the shards but never yielded.
                **verdict_metadata(approved),
                "dagster/row_count": summary.records - excluded_count(approved),
                "excluded records": excluded_count(approved),
                "records in the shards": summary.records,
                # After a blocked run the UI shows this beside "Failed": the policy says which run's rules made it.
                "approval policy": dg.MetadataValue.json(spec.policy.model_dump()),
                "bytes hashed": summary.bytes_hashed,
                **gate_metadata(approved),
                "croissant uri": card.uri,
                "croissant sha256": card.sha256,
                "croissant": link(card.uri),
                "croissant written": card_written,
                **oms_signature(vault, spec, opened),
                "open it (trainer)": dg.MetadataValue.md(
                    "```python\n"
                    + trainer_snippet(record.uri, record.sha256, spec, store, EXCLUSIONS in handoffs)
                    + "\n```"
                ),
                "request": dg.MetadataValue.json(request.model_dump(mode="json")),
            },
            data_version=dg.DataVersion(summary.data_manifest_sha256),
        )
        yield dg.AssetCheckResult(
            check_name=OPENS,
            passed=opened.manifest_sha256 == manifest.ref.sha256,
            description=f"{record.uri} opens with the trusted keys and approves manifest {opened.manifest_sha256}",
            metadata={"data_manifest_sha256": opened.manifest_sha256, "approval sha256": record.sha256},
        )

    return approved_dataset


def excluded_records(vault: TrainVault, exclusions: Handoff) -> int:
    """How many records the exclusions a hand-off names leave out (read by digest)."""
    from trainvault.contamination import Exclusions
    from trainvault.publication import read_document

    return len(
        read_document(vault.storage, Exclusions, exclusions.ref.uri, sha256=exclusions.ref.sha256).document.records
    )


def verdict_metadata(approved: ApprovedDataset) -> Metadata:
    """The verdict the gate reached, for the approval's page: approved, and per benchmark of the report its
    items, contaminated items, the records the approval excludes for it and whether it passed as scanned."""
    per = approved.exclusions.per_benchmark() if approved.exclusions is not None else {}
    rows = [
        {
            "benchmark": b.name,
            "items": b.n_items,
            "checkable": b.n_checkable,
            "contaminated": b.n_contaminated,
            "excluded records": per.get(b.name, 0),
            "pass": b.passed,
        }
        for b in approved.report.benchmarks
    ]
    excluded = excluded_count(approved)
    return {
        "verdict": "pass: the gate approved it within the verifier contract"
        + (f" after excluding {excluded} record(s) that hold contaminated items" if excluded else ""),
        "per benchmark": table(
            rows,
            [
                ("benchmark", "string"),
                ("items", "int"),
                ("checkable", "int"),
                ("contaminated", "int"),
                ("excluded records", "int"),
                ("pass", "bool"),
            ],
        ),
    }


def excluded_count(approved: ApprovedDataset) -> int:
    """How many records of the approved shards the approval leaves out."""
    summary = approved.summary
    return summary.exclusions.records if summary.exclusions is not None else 0


def gate_metadata(approved: ApprovedDataset) -> Metadata:
    """What the gate checked beyond the hashes: the scanner's signers, the re-scanned shards, the exclusions,
    and the policy it applied."""
    summary = approved.summary
    out: Metadata = {}
    if summary.attestation is not None:
        out["report signed by"] = dg.MetadataValue.json(summary.attestation.report_signers)
        out["re-scanned shards"] = dg.MetadataValue.json(list(summary.attestation.rescan.shards))
    if summary.exclusions is not None:
        out["excluded per benchmark"] = dg.MetadataValue.json(dict(summary.exclusions.per_benchmark))
    if summary.policy is not None:  # signed with the record: what a trainer's policy is held against
        out["applied policy"] = dg.MetadataValue.md("\n".join(f"- {line}" for line in summary.policy.describe()))
    return out
