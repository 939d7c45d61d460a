"""The gate's cross-checks: each bound document against the others and the trainer's policy.
Each check returns or raises `ApprovalError` ("approval denied: ...") naming what failed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

from trainvault.approval.pins import ProducerPins, canonical_package_name
from trainvault.approval.policy import ApprovalPolicy
from trainvault.approval.scan_manifest import (
    DeclaredFile,
    ScannedFile,
    TrainingScanManifest,
)
from trainvault.contamination.contract import VerifierContract
from trainvault.contamination.exclusions import Exclusions, truncated_items
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.release import LoadedRelease
from trainvault.contamination.report import ContaminationReport
from trainvault.contamination.text_fields import TextFieldSurvey, exempt
from trainvault.errors import ApprovalError, ManifestError, UnscannedFieldError
from trainvault.publication.manifest import DataManifest, ShardDescriptor
from trainvault.refs import ObjectRef
from trainvault.uris import parent_uri, uri_resolver


def deny(message: str) -> NoReturn:
    raise ApprovalError(f"approval denied: {message}")


def _ratio_le(a: list[int], b: list[int]) -> bool:
    """a <= b for fractions [n, d]."""
    return a[0] * b[1] <= b[0] * a[1]


def check_scan(
    scan: TrainingScanManifest,
    manifest_ref: ObjectRef,
    manifest_uri: str,
    declared: list[DeclaredFile],
    totals: dict[str, int],
) -> dict[str, ScannedFile]:
    if scan.data_manifest_sha256 != manifest_ref.sha256:
        deny(
            f"training_scan_manifest was made for data manifest {scan.data_manifest_sha256}, not the bound "
            f"{manifest_ref.sha256}: the manifest was edited after the scan; rebuild the scan manifest and rescan"
        )
    resolve = uri_resolver(parent_uri(manifest_uri), absolute="within")
    scanned: dict[str, ScannedFile] = {}
    for f in scan.files:
        if f.role == "data-manifest":
            scanned[manifest_uri] = f
            continue
        try:
            scanned[resolve(f.uri, lambda: "training_scan_manifest")] = f
        except ManifestError as exc:
            deny(str(exc))
    expected = {f.resolved: f for f in declared}
    missing = sorted(set(expected) - set(scanned))
    extra = sorted(set(scanned) - set(expected))
    if missing:
        deny(
            f"{len(missing)} file(s) of the data manifest were never scanned (first: {missing[0]}); rescan the publication"
        )
    if extra:
        deny(
            f"the scan manifest lists {len(extra)} file(s) the data manifest does not declare (first: {extra[0]}); "
            "it belongs to another file set: rescan this publication"
        )
    for uri, d in expected.items():
        s = scanned[uri]
        if s.role != d.role or s.sha256 != d.sha256 or (d.size_bytes is not None and s.size_bytes != d.size_bytes):
            deny(
                f"{d.role} {uri}: the scan manifest records {s.role} {s.size_bytes} bytes sha256 {s.sha256}, the data "
                f"manifest binds {d.size_bytes if d.size_bytes is not None else '-'} bytes sha256 {d.sha256}; rescan"
            )
    t = scan.totals
    if (t.shards, t.records, t.shard_bytes) != (totals["shards"], totals["records"], totals["shard_bytes"]):
        deny(
            f"scan manifest totals (shards {t.shards}, records {t.records}, bytes {t.shard_bytes}) differ from the data "
            f"manifest ({totals['shards']}, {totals['records']}, {totals['shard_bytes']}); rescan"
        )
    return scanned


def check_contract(contract: VerifierContract, ref: ObjectRef, release: LoadedRelease, policy: ApprovalPolicy) -> None:
    # Parsing already refused methods, hashes and normalisations this library does not implement.
    if policy.verifier_contract_sha256 is not None and ref.sha256 != policy.verifier_contract_sha256:
        deny(
            f"verifier_contract sha256 {ref.sha256} is not the contract this trainer pins "
            f"({policy.verifier_contract_sha256}); scan under the pinned contract"
        )
    mine, floor = contract.policy, policy.min_policy
    if not _ratio_le(mine.max_uncheckable_fraction, floor.max_uncheckable_fraction):
        deny(
            f"verifier contract allows {mine.max_uncheckable_fraction} uncheckable items, looser than the accepted "
            f"{floor.max_uncheckable_fraction}; pass a looser ApprovalPolicy.min_policy only on purpose"
        )
    if floor.count_uncounted and contract.method.evidence is not None and not mine.count_uncounted:
        # Without an evidence rule (v1, v2) every match counts already; with one, leaving out what it
        # does not count is looser than a floor that counts them.
        deny(
            "verifier contract leaves the matches its evidence rule does not count out of the verdict "
            "(count_uncounted false), looser than the accepted limits that count them; pass a looser "
            "ApprovalPolicy.min_policy only on purpose"
        )
    names = {b.name for b in release.release.benchmarks} | set(mine.max_contaminated_fraction) - {"*"}
    for name in sorted(names | {"*"}):
        got = mine.contaminated_limit(name) if name != "*" else mine.max_contaminated_fraction["*"]
        limit = floor.contaminated_limit(name) if name != "*" else floor.max_contaminated_fraction["*"]
        if not _ratio_le(got, limit):
            deny(
                f"verifier contract allows contaminated fraction {got} for benchmark {name!r}, looser than the "
                f"accepted {limit}; pass a looser ApprovalPolicy.min_policy only on purpose"
            )


def check_report(
    report: ContaminationReport,
    refs: Mapping[str, ObjectRef],
    scan: TrainingScanManifest,
    index: EvalIndex,
    exclusions: Exclusions | None = None,
) -> None:
    """The report judged exactly the bound artifacts (`index`: the bound release under the
    bound contract) and passes the contract's policy (after `exclusions`, already checked
    with `check_exclusions`)."""
    release, contract = index.release, index.contract
    backrefs = (
        ("data manifest", report.training.data_manifest_sha256, refs["data_manifest"].sha256, "other data"),
        ("scan manifest", report.training.scan_manifest_sha256, refs["training_scan_manifest"].sha256, "another scan"),
        (
            "evaluation release",
            report.eval_release.sha256,
            refs["evaluation_release"].sha256,
            "another evaluation release",
        ),
        ("verifier contract", report.verifier_contract.sha256, refs["verifier_contract"].sha256, "another contract"),
        ("producer pins", report.producer_pins.sha256, refs["producer_pins"].sha256, "other producer pins"),
    )
    for what, got, bound, meaning in backrefs:
        if got != bound:
            deny(
                f"the contamination report judged {what} {got}, the request binds {bound}: it is a report for "
                f"{meaning}; scan exactly the bound artifacts and bind that report"
            )
    if report.eval_release.id != release.release.id:
        deny(f"the report names release {report.eval_release.id!r}, the bound release is {release.release.id!r}")
    if report.method != contract.method or report.fields != contract.fields:
        deny("the report was made with another method or other fields than the bound verifier contract; rescan")
    if report.policy != contract.policy:
        deny(
            "the report's policy differs from the bound verifier contract's: the policy was changed after the "
            "scan; a verdict is only judged under the contract's policy"
        )
    cov, t = report.coverage, scan.totals
    if (cov.shards, cov.records, cov.bytes) != (t.shards, t.records, t.shard_bytes):
        deny(
            f"report coverage (shards {cov.shards}, records {cov.records}, bytes {cov.bytes}) differs from the scan "
            f"manifest totals ({t.shards}, {t.records}, {t.shard_bytes}): not everything was scanned"
        )
    expected = {b.name: len(b.items) for b in release.benchmarks}
    covered = {b.name: b.n_items for b in report.benchmarks}
    if covered != expected:
        deny(f"the report covers benchmarks {covered}, the bound release holds {expected}: stale benchmarks; rescan")
    _check_items(report, index)
    _check_verdict(report, contract, excluded=exclusions is not None)


def _check_items(report: ContaminationReport, index: EvalIndex) -> None:
    """What the report says of the release itself (which items are uncheckable and why, item
    digests and n-gram totals, hot n-grams) is what the bound contract makes of the bound
    release: otherwise a self-consistent report could call uncheckable items checkable and
    pass a policy the data fails, which no re-scan of shards would notice."""
    items = {(b.name, it.item_id): it for b in index.benchmarks for it in b.items}
    mine = {b.name: b for b in index.benchmarks}
    for b in report.benchmarks:
        ib = mine[b.name]  # check_report: the report's benchmarks are the release's
        unc = sum(it.uncheckable is not None for it in ib.items)
        if (b.split, b.n_uncheckable, b.n_hot_ngrams_excluded) != (ib.split, unc, ib.n_hot_ngrams_excluded):
            deny(
                f"the report says benchmark {b.name!r} (split {b.split!r}) has {b.n_uncheckable} uncheckable items and "
                f"{b.n_hot_ngrams_excluded} hot n-grams; the bound contract makes {unc} and {ib.n_hot_ngrams_excluded} "
                f"of the bound release (split {ib.split!r}): the report does not describe this release; rescan"
            )
    for u in report.uncheckable_items:
        it = items.get((u.benchmark, u.item_id))
        if it is None or (it.uncheckable, it.item_sha256, it.n_tokens) != (u.reason, u.item_sha256, u.tokens):
            deny(
                f"the report lists {u.benchmark} item {u.item_id!r} as uncheckable ({u.reason}, {u.tokens} tokens), "
                "which is not what the bound contract makes of the bound release; rescan"
            )
    for c in [*report.contaminated_items, *(report.uncounted_items or [])]:
        it = items.get((c.benchmark, c.item_id))
        if (
            it is None
            or it.uncheckable is not None
            or (it.item_sha256, it.total_ngrams) != (c.item_sha256, c.total_ngrams)
            or (c.informative_ngrams is not None and c.informative_ngrams != len(it.counted_positions))
        ):
            deny(
                f"the report lists {c.benchmark} item {c.item_id!r} (sha256 {c.item_sha256}, {c.total_ngrams} n-grams) "
                "as contaminated, which is not a checkable item of the bound release under the bound contract; rescan"
            )


def _check_verdict(report: ContaminationReport, contract: VerifierContract, *, excluded: bool) -> None:
    """The verdict recomputed from the counts, after exclusions (checked to cover every hit:
    no contaminated item remains); the stored flags must agree with the report's own counts."""
    policy = contract.policy
    verdicts = {
        b.name: policy.benchmark_passes(b.name, b.n_items, b.n_checkable, b.n_uncheckable, b.n_contaminated)
        for b in report.benchmarks
    }
    failing = [
        f"{b.name}: {b.n_contaminated} of {b.n_checkable} checkable items contaminated, {b.n_uncheckable} of "
        f"{b.n_items} uncheckable"
        for b in report.benchmarks
        if not policy.benchmark_passes(
            b.name, b.n_items, b.n_checkable, b.n_uncheckable, 0 if excluded else b.n_contaminated
        )
    ]
    if failing or not report.method.exhaustive:
        deny(
            "the contamination report fails under the contract's policy"
            + (" after exclusions" if excluded else "")
            + " ("
            + "; ".join(failing)
            + "): remove the contaminated training records listed in the report, "
            "rebuild, rescan" + ("" if excluded else "; or bind exclusions where the policy allows them")
        )
    if report.passed != all(verdicts.values()) or any(b.passed != verdicts[b.name] for b in report.benchmarks):
        deny(
            "the report's stored verdict disagrees with the verdict recomputed from its counts; the report is "
            "inconsistent: rescan"
        )


def check_exclusions(
    exclusions: Exclusions,
    report: ContaminationReport,
    refs: Mapping[str, ObjectRef],
    manifest: DataManifest,
    policy: ApprovalPolicy,
) -> None:
    """Exclusions the policy allows, for the bound manifest and report, naming existing records,
    within the policy's fraction, and covering every hit the report lists."""
    if not policy.allow_exclusions:
        deny(
            f"the request binds exclusions ({len(exclusions.records)} records), the trainer's policy does not allow "
            "exclusions: remove the contaminated records and rebuild, or allow exclusions on purpose"
        )
    if exclusions.data_manifest_sha256 != refs["data_manifest"].sha256:
        deny(
            f"the exclusions name data manifest {exclusions.data_manifest_sha256}, the request binds "
            f"{refs['data_manifest'].sha256}; generate them from this chain's report"
        )
    if exclusions.contamination_report_sha256 != refs["contamination_report"].sha256:
        deny(
            f"the exclusions were generated from report {exclusions.contamination_report_sha256}, the request binds "
            f"{refs['contamination_report'].sha256}; generate them from the bound report"
        )
    entries = {(split, e.key): e for split, s in manifest.splits.items() for e in s.shards}
    for r in exclusions.records:
        e = entries.get((r.split, r.shard))
        if e is None or e.sha256 != r.shard_sha256 or r.record_index >= e.record_count:
            deny(
                f"the exclusions name record {r.record_index} of shard {r.split}/{r.shard} (sha256 {r.shard_sha256}), "
                "which the data manifest does not hold; generate them from this chain's report"
            )
    total = sum(e.record_count for e in entries.values())
    n, d = policy.max_excluded_fraction
    if len(exclusions.records) * d > n * total:
        deny(
            f"the exclusions leave out {len(exclusions.records)} of {total} records, more than the policy's "
            f"{n}/{d}: the data is too contaminated to approve by exclusion; remove the records and rebuild"
        )
    capped = truncated_items(report)
    if capped:
        deny(
            f"the report lists only some hits of {len(capped)} item(s) (first: {capped[0]}), so no exclusions can "
            "be shown to cover them; raise the contract's max_hits_per_item and rescan"
        )
    covered = {(r.split, r.shard, r.record_index) for r in exclusions.records}
    for it in report.contaminated_items:
        for h in it.hits:
            if (h.split, h.shard, h.record_index) not in covered:
                deny(
                    f"the report finds {it.benchmark} item {it.item_id!r} in record {h.record_index} of shard "
                    f"{h.split}/{h.shard}, which the exclusions do not cover; generate them from the bound report"
                )


def check_pins_allowed(pins: ProducerPins, policy: ApprovalPolicy) -> None:
    if policy.allowed_producers is None:
        return
    allowed = {canonical_package_name(k): set(v) for k, v in policy.allowed_producers.items()}
    for p in pins.packages:
        if p.name not in allowed:
            deny(
                f"producer pin {p.name}=={p.version} is not in the trainer's allowlist (unknown producer); "
                "re-derive with allowed producers or extend the allowlist on purpose"
            )
        if p.version not in allowed[p.name]:
            deny(
                f"producer pin {p.name}=={p.version} is not an allowed version ({', '.join(sorted(allowed[p.name]))}):"
                " stale or revoked producer; re-derive the data with an allowed version"
            )


def check_producer(desc: ShardDescriptor, pins: ProducerPins, where: str) -> None:
    pinned = pins.version_of(desc.producer.library)
    if pinned is None:
        deny(
            f"{where}: the shard was produced by {desc.producer.library} {desc.producer.version}, which the "
            "producer pins do not pin; pin every producer"
        )
    if pinned != desc.producer.version:
        deny(
            f"{where}: the shard was produced by {desc.producer.library} {desc.producer.version}, the producer pins "
            f"say {pinned}: stale pins; write pins for the producers that made the data"
        )


def check_text_fields(survey: TextFieldSurvey, contract: VerifierContract, policy: ApprovalPolicy) -> list[str]:
    """Deny text-carrying fields the contract leaves unscanned, unless the policy exempts them;
    return those it exempts."""
    unscanned = sorted(f for f in survey.text_fields if not exempt(f, policy.unscanned_fields))
    if not unscanned:
        return sorted(f for f in survey.text_fields if exempt(f, policy.unscanned_fields))
    shown = ", ".join(repr(f) for f in unscanned[:10]) + (
        f" and {len(unscanned) - 10} more" if len(unscanned) > 10 else ""
    )
    raise UnscannedFieldError(
        f"approval denied: record field(s) {shown} carry text (values of {survey.min_tokens} or more tokens) that the "
        f"verifier contract does not scan (it scans {', '.join(map(repr, contract.fields))}): benchmark text there "
        "would go unseen. Scan them (a top-level string field belongs in the contract's fields), or, if the trainer "
        "never trains on them, exempt them: ApprovalPolicy(unscanned_fields=[...]) or --unscanned-field NAME",
        tuple(unscanned),
    )
