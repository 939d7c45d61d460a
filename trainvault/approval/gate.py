"""The approval gate: hash every bound artifact and every scanned file, check that they
agree with each other, recompute the verdict, and only then hand out an `ApprovedDataset`.

The gate is monotonic (deny unless every check passes): a missing binding, an unreadable
or unknown document, a digest that differs, or a verdict that does not follow from the
counts raises `ApprovalError` naming what failed and what to do.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel, ConfigDict

from trainvault.approval.dataset import ApprovedDataset, issue
from trainvault.approval.hashing import DEFAULT_THREADS, HashedObject, hash_objects
from trainvault.approval.pins import ProducerPins, canonical_package_name
from trainvault.approval.progress import HashProgressCallback
from trainvault.approval.request import ApprovalRequest, ArtifactRef
from trainvault.approval.scan_manifest import (
    DeclaredFile,
    ScannedFile,
    TrainingScanManifest,
    _resolve_declared,
    declared_files,
)
from trainvault.canonical import is_sha256_hex
from trainvault.contamination.contract import DEFAULT_CONTRACT, Policy, VerifierContract
from trainvault.contamination.release import LoadedRelease, load_release
from trainvault.contamination.report import ContaminationReport
from trainvault.documents import Document
from trainvault.errors import ApprovalError, IntegrityError, ManifestError, TrainVaultError
from trainvault.manifest import DataManifest, ShardDescriptor
from trainvault.reader import parse_descriptor
from trainvault.storage import Storage, normalize_uri, parent_uri
from trainvault.version import __version__

if TYPE_CHECKING:
    from trainvault.client import TrainVault


@dataclass(frozen=True)
class ApprovalPolicy:
    """What the trainer expects; the gate denies whatever these do not allow.

    - `evaluation_release_sha256`: the release the trainer will evaluate on (None: any
      release the report binds).
    - `verifier_contract_sha256`: the exact contract to accept (None: any contract this
      library implements whose policy is no looser than `min_policy`).
    - `allowed_producers`: package name -> allowed versions; every producer pin must be
      listed (unknown packages and stale or revoked versions are denied). None: no allowlist,
      but pins must still match the producers the shard descriptors record.
    - `min_policy`: the loosest contamination policy accepted (default: the library's,
      none contaminated and at most 1/20 uncheckable).
    """

    evaluation_release_sha256: str | None = None
    verifier_contract_sha256: str | None = None
    allowed_producers: Mapping[str, Collection[str]] | None = None
    min_policy: Policy = field(default_factory=lambda: DEFAULT_CONTRACT.policy)

    def __post_init__(self) -> None:
        for name in ("evaluation_release_sha256", "verifier_contract_sha256"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and is_sha256_hex(value)):
                raise ValueError(f"ApprovalPolicy.{name} must be a 64-character lowercase hex sha256, got {value!r}")
        if self.allowed_producers is not None:
            for name, versions in self.allowed_producers.items():
                if isinstance(versions, str):
                    raise ValueError(f"allowed_producers[{name!r}] must be a collection of versions, not a string")


class VerificationSummary(BaseModel):
    """What the gate verified: recorded in the approval statement and shown to people."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    data_manifest_sha256: str
    shards: int
    records: int
    shard_bytes: int
    files_hashed: int
    bytes_hashed: int
    evaluation_release_id: str
    benchmarks: list[str]
    contamination_method: str
    contaminated_items: int
    verdict_recomputed: bool
    trainvault_version: str


@dataclass(frozen=True)
class GateResult:
    """Everything an `ApprovedDataset` is made from (internal)."""

    request: ApprovalRequest
    manifest_uri: str
    manifest_raw: bytes
    manifest: DataManifest
    descriptors_raw: dict[str, bytes]
    shard_sizes: dict[str, int]
    report: ContaminationReport
    summary: VerificationSummary


def _deny(message: str) -> NoReturn:
    raise ApprovalError(f"approval denied: {message}")


def _ratio_le(a: list[int], b: list[int]) -> bool:
    """a <= b for fractions [n, d]."""
    return a[0] * b[1] <= b[0] * a[1]


def _parse(cls: type[Document], name: str, obj: HashedObject) -> Any:
    try:
        assert obj.data is not None
        return cls.from_json_bytes(obj.data, source=obj.uri)
    except ManifestError as exc:
        _deny(f"{name} is not a readable {cls.KIND} v{cls.VERSION} ({exc}); bind a document this trainvault supports")


def coerce_request(request: Any) -> ApprovalRequest:
    """An `ApprovalRequest` from itself, a parsed JSON object, or JSON bytes."""
    if isinstance(request, ApprovalRequest):
        return request
    try:
        if isinstance(request, (bytes, str)):
            return ApprovalRequest.from_json_bytes(request, source="approval request")
        return ApprovalRequest.from_obj(request, source="approval request")
    except ManifestError as exc:
        raise ApprovalError(f"approval denied: {exc}") from None


def run_gate(
    storage: Storage,
    request: Any,
    *,
    policy: ApprovalPolicy | None = None,
    progress: HashProgressCallback | None = None,
    threads: int = DEFAULT_THREADS,
) -> GateResult:
    """Run every check; return what was verified, or raise `ApprovalError`."""
    request = coerce_request(request)
    policy = policy or ApprovalPolicy()
    try:
        return _gate(storage, request, policy, progress, threads)
    except ApprovalError:
        raise
    except TrainVaultError as exc:
        raise ApprovalError(f"approval denied: {exc}") from exc


def _gate(
    storage: Storage,
    request: ApprovalRequest,
    policy: ApprovalPolicy,
    progress: HashProgressCallback | None,
    threads: int,
) -> GateResult:
    refs = request.bindings()
    uris = {name: normalize_uri(ref.uri) for name, ref in refs.items()}
    docs = hash_objects(storage, list(uris.values()), keep=set(uris.values()), threads=threads)
    for name, ref in refs.items():
        got = docs[uris[name]]
        if got.sha256 != ref.sha256:
            _deny(
                f"{name} {uris[name]} has sha256 {got.sha256}, the request binds {ref.sha256}: it was replaced or "
                "altered; bind the artifact that was judged, or rebuild the chain"
            )

    manifest_uri = uris["data_manifest"]
    raw = docs[manifest_uri].data
    assert raw is not None
    try:
        manifest, declared, totals = declared_files(manifest_uri, raw)
    except ManifestError as exc:
        _deny(f"data_manifest: {exc}")
    scan: TrainingScanManifest = _parse(TrainingScanManifest, "training_scan_manifest", docs[uris["training_scan_manifest"]])
    report: ContaminationReport = _parse(ContaminationReport, "contamination_report", docs[uris["contamination_report"]])
    contract: VerifierContract = _parse(VerifierContract, "verifier_contract", docs[uris["verifier_contract"]])
    pins: ProducerPins = _parse(ProducerPins, "producer_pins", docs[uris["producer_pins"]])
    release = load_release(storage, uris["evaluation_release"], sha256=refs["evaluation_release"].sha256)

    scanned = _check_scan(scan, refs["data_manifest"], manifest_uri, declared, totals)
    _check_contract(contract, refs["verifier_contract"], release, policy)
    _check_report(report, refs, scan, release, contract)
    _check_pins_allowed(pins, policy)
    if policy.evaluation_release_sha256 is not None and release.sha256 != policy.evaluation_release_sha256:
        _deny(
            f"evaluation_release {release.release.id!r} (sha256 {release.sha256}) is not the release this trainer "
            f"evaluates on ({policy.evaluation_release_sha256}); scan against that release"
        )

    # Every declared file, hashed now; descriptors are kept: the loader parses exactly these bytes.
    files = [f for f in declared if f.role != "data-manifest"]
    hashed = _hash_files(storage, files, scanned, threads, progress)
    for f in files:
        h, s = hashed[f.resolved], scanned[f.resolved]
        if (h.size, h.sha256) != (s.size_bytes, s.sha256):
            _deny(
                f"{f.role} {f.resolved} is {h.size} bytes with sha256 {h.sha256} on storage, but was scanned and "
                f"bound as {s.size_bytes} bytes with sha256 {s.sha256}: it changed after it was scanned (swapped, "
                "truncated or extended); do not train on it: re-publish, rescan and approve again"
            )

    from trainvault.client import resolve_manifest_uris

    resolved = resolve_manifest_uris(manifest, parent_uri(manifest_uri))
    descriptors_raw: dict[str, bytes] = {}
    shard_sizes: dict[str, int] = {}
    for split in resolved.splits.values():
        for entry in split.shards:
            data = hashed[entry.descriptor_uri].data
            assert data is not None
            desc = parse_descriptor(entry, data)
            if desc.data_format != manifest.data_format:
                _deny(f"{entry.descriptor_uri}: descriptor says {desc.data_format}, the manifest {manifest.data_format}")
            _check_producer(desc, pins, entry.descriptor_uri)
            descriptors_raw[entry.descriptor_uri] = data
            shard_sizes[entry.uri] = entry.size_bytes

    summary = VerificationSummary(
        data_manifest_sha256=refs["data_manifest"].sha256,
        shards=totals["shards"],
        records=totals["records"],
        shard_bytes=totals["shard_bytes"],
        files_hashed=len(files) + len(docs),
        bytes_hashed=sum(h.size for h in hashed.values()) + sum(d.size for d in docs.values()),
        evaluation_release_id=release.release.id,
        benchmarks=[b.name for b in report.benchmarks],
        contamination_method=report.method.id,
        contaminated_items=len(report.contaminated_items),
        verdict_recomputed=True,
        trainvault_version=__version__,
    )
    return GateResult(request, manifest_uri, raw, resolved, descriptors_raw, shard_sizes, report, summary)


def _hash_files(
    storage: Storage,
    files: list[DeclaredFile],
    scanned: Mapping[str, ScannedFile],
    threads: int,
    progress: HashProgressCallback | None,
) -> dict[str, HashedObject]:
    """Hash every file, reading none past the size it was scanned as."""
    try:
        return hash_objects(
            storage,
            [f.resolved for f in files],
            keep={f.resolved for f in files if f.role == "descriptor"},
            bound_sizes={f.resolved: scanned[f.resolved].size_bytes for f in files},
            threads=threads,
            progress=progress,
        )
    except IntegrityError as exc:
        _deny(
            f"{exc}: it changed after it was scanned (swapped, truncated or extended); do not train on it: "
            "re-publish, rescan and approve again"
        )


def _check_scan(
    scan: TrainingScanManifest,
    manifest_ref: ArtifactRef,
    manifest_uri: str,
    declared: list[DeclaredFile],
    totals: dict[str, int],
) -> dict[str, ScannedFile]:
    if scan.data_manifest_sha256 != manifest_ref.sha256:
        _deny(
            f"training_scan_manifest was made for data manifest {scan.data_manifest_sha256}, not the bound "
            f"{manifest_ref.sha256}: the manifest was edited after the scan; rebuild the scan manifest and rescan"
        )
    base = parent_uri(manifest_uri)
    scanned: dict[str, ScannedFile] = {}
    for f in scan.files:
        if f.role == "data-manifest":
            scanned[manifest_uri] = f
            continue
        try:
            scanned[_resolve_declared(f.uri, base, "training_scan_manifest")] = f
        except ManifestError as exc:
            _deny(str(exc))
    expected = {f.resolved: f for f in declared}
    missing = sorted(set(expected) - set(scanned))
    extra = sorted(set(scanned) - set(expected))
    if missing:
        _deny(f"{len(missing)} file(s) of the data manifest were never scanned (first: {missing[0]}); rescan the publication")
    if extra:
        _deny(f"the scan manifest lists {len(extra)} file(s) the data manifest does not declare (first: {extra[0]}); "
              "it belongs to another file set: rescan this publication")
    for uri, d in expected.items():
        s = scanned[uri]
        if s.role != d.role or s.sha256 != d.sha256 or (d.size_bytes is not None and s.size_bytes != d.size_bytes):
            _deny(
                f"{d.role} {uri}: the scan manifest records {s.role} {s.size_bytes} bytes sha256 {s.sha256}, the data "
                f"manifest binds {d.size_bytes if d.size_bytes is not None else '-'} bytes sha256 {d.sha256}; rescan"
            )
    t = scan.totals
    if (t.shards, t.records, t.shard_bytes) != (totals["shards"], totals["records"], totals["shard_bytes"]):
        _deny(
            f"scan manifest totals (shards {t.shards}, records {t.records}, bytes {t.shard_bytes}) differ from the data "
            f"manifest ({totals['shards']}, {totals['records']}, {totals['shard_bytes']}); rescan"
        )
    return scanned


def _check_contract(
    contract: VerifierContract, ref: ArtifactRef, release: LoadedRelease, policy: ApprovalPolicy
) -> None:
    # Parsing already refused methods, hashes and normalisations this library does not implement.
    if policy.verifier_contract_sha256 is not None and ref.sha256 != policy.verifier_contract_sha256:
        _deny(f"verifier_contract sha256 {ref.sha256} is not the contract this trainer pins "
              f"({policy.verifier_contract_sha256}); scan under the pinned contract")
    mine, floor = contract.policy, policy.min_policy
    if not _ratio_le(mine.max_uncheckable_fraction, floor.max_uncheckable_fraction):
        _deny(f"verifier contract allows {mine.max_uncheckable_fraction} uncheckable items, looser than the accepted "
              f"{floor.max_uncheckable_fraction}; pass a looser ApprovalPolicy.min_policy only on purpose")
    names = {b.name for b in release.release.benchmarks} | set(mine.max_contaminated_fraction) - {"*"}
    for name in sorted(names | {"*"}):
        got = mine.contaminated_limit(name) if name != "*" else mine.max_contaminated_fraction["*"]
        limit = floor.contaminated_limit(name) if name != "*" else floor.max_contaminated_fraction["*"]
        if not _ratio_le(got, limit):
            _deny(f"verifier contract allows contaminated fraction {got} for benchmark {name!r}, looser than the "
                  f"accepted {limit}; pass a looser ApprovalPolicy.min_policy only on purpose")


def _check_report(
    report: ContaminationReport,
    refs: Mapping[str, ArtifactRef],
    scan: TrainingScanManifest,
    release: LoadedRelease,
    contract: VerifierContract,
) -> None:
    backrefs = (
        ("data manifest", report.training.data_manifest_sha256, refs["data_manifest"].sha256, "other data"),
        ("scan manifest", report.training.scan_manifest_sha256, refs["training_scan_manifest"].sha256, "another scan"),
        ("evaluation release", report.eval_release.sha256, refs["evaluation_release"].sha256, "another evaluation release"),
        ("verifier contract", report.verifier_contract.sha256, refs["verifier_contract"].sha256, "another contract"),
        ("producer pins", report.producer_pins.sha256, refs["producer_pins"].sha256, "other producer pins"),
    )
    for what, got, bound, meaning in backrefs:
        if got != bound:
            _deny(f"the contamination report judged {what} {got}, the request binds {bound}: it is a report for "
                  f"{meaning}; scan exactly the bound artifacts and bind that report")
    if report.eval_release.id != release.release.id:
        _deny(f"the report names release {report.eval_release.id!r}, the bound release is {release.release.id!r}")
    if report.method != contract.method or report.fields != contract.fields:
        _deny("the report was made with another method or other fields than the bound verifier contract; rescan")
    if report.policy != contract.policy:
        _deny("the report's policy differs from the bound verifier contract's: the policy was changed after the "
              "scan; a verdict is only judged under the contract's policy")
    cov, t = report.coverage, scan.totals
    if (cov.shards, cov.records, cov.bytes) != (t.shards, t.records, t.shard_bytes):
        _deny(f"report coverage (shards {cov.shards}, records {cov.records}, bytes {cov.bytes}) differs from the scan "
              f"manifest totals ({t.shards}, {t.records}, {t.shard_bytes}): not everything was scanned")
    expected = {b.name: len(b.items) for b in release.benchmarks}
    got = {b.name: b.n_items for b in report.benchmarks}
    if got != expected:
        _deny(f"the report covers benchmarks {got}, the bound release holds {expected}: stale benchmarks; rescan")
    failing = [
        f"{b.name}: {b.n_contaminated} of {b.n_checkable} checkable items contaminated, {b.n_uncheckable} of "
        f"{b.n_items} uncheckable"
        for b in report.benchmarks
        if not contract.policy.benchmark_passes(b.name, b.n_items, b.n_checkable, b.n_uncheckable, b.n_contaminated)
    ]
    if failing or not report.recompute_pass(contract.policy):
        _deny("the contamination report fails under the contract's policy (" + "; ".join(failing) + "): remove the "
              "contaminated training records listed in the report, rebuild, rescan")
    if report.passed is not True or not all(b.passed for b in report.benchmarks):
        _deny("the report's stored verdict disagrees with the verdict recomputed from its counts; the report is "
              "inconsistent: rescan")


def _check_pins_allowed(pins: ProducerPins, policy: ApprovalPolicy) -> None:
    if policy.allowed_producers is None:
        return
    allowed = {canonical_package_name(k): set(v) for k, v in policy.allowed_producers.items()}
    for p in pins.packages:
        if p.name not in allowed:
            _deny(f"producer pin {p.name}=={p.version} is not in the trainer's allowlist (unknown producer); "
                  "re-derive with allowed producers or extend the allowlist on purpose")
        if p.version not in allowed[p.name]:
            _deny(f"producer pin {p.name}=={p.version} is not an allowed version ({', '.join(sorted(allowed[p.name]))}):"
                  " stale or revoked producer; re-derive the data with an allowed version")


def _check_producer(desc: ShardDescriptor, pins: ProducerPins, where: str) -> None:
    pinned = pins.version_of(desc.producer.library)
    if pinned is None:
        _deny(f"{where}: the shard was produced by {desc.producer.library} {desc.producer.version}, which the "
              "producer pins do not pin; pin every producer")
    if pinned != desc.producer.version:
        _deny(f"{where}: the shard was produced by {desc.producer.library} {desc.producer.version}, the producer pins "
              f"say {pinned}: stale pins; write pins for the producers that made the data")


def approve_dataset(
    vault: TrainVault,
    request: Any,
    *,
    policy: ApprovalPolicy | None = None,
    progress: HashProgressCallback | None = None,
    threads: int = DEFAULT_THREADS,
) -> ApprovedDataset:
    """Run the gate over `request` (an `ApprovalRequest`, its JSON object or bytes) and
    return the `ApprovedDataset`, or raise `ApprovalError` saying what failed.

    Reads and hashes every bound artifact and every file the scan manifest declares
    (on `threads` threads, reporting to `progress`) before anything is returned.
    """
    result = run_gate(vault.storage, request, policy=policy, progress=progress, threads=threads)
    return issue(result, vault.storage_config)
