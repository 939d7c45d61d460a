"""``trainvault keygen|approve|verify|exclusions|croissant``: keys, the gate, exclusions and the Croissant card."""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from trainvault.cli.console import gate_progress, mb, vault_from_env, waiting
from trainvault.cli.options import add_amendment_options, amendment_source
from trainvault.cli.recognize import Takes, reads
from trainvault.errors import TrainVaultError


def cmd_keygen(args: argparse.Namespace) -> int:
    if args.type == "ecdsa-p256":
        from trainvault.approval.ecdsa import write_ecdsa_keypair

        private, public, oms_key = write_ecdsa_keypair(args.out)
        ident = f"hint        {oms_key.hint} (ECDSA P-256: for oms-export, not for approvals)"
    else:
        from trainvault.approval.keys import write_keypair

        private, public, key = write_keypair(args.out)
        ident = f"keyid       {key.keyid}"
    print(f"private key {private} (keep it secret; mode 0600)")
    print(f"public key  {public}")
    print(ident)
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    from trainvault.approval.gate import approve_dataset
    from trainvault.approval.keys import load_signing_key
    from trainvault.approval.record import write_approval

    vault = vault_from_env()
    keys = [load_signing_key(k) for k in args.signing_key] if args.signing_key else [load_signing_key()]
    raw = vault.storage.get_document(args.request)
    provenance: dict[str, str] = {}
    for item in args.provenance or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise TrainVaultError(f"--provenance takes NAME=VALUE, got {item!r}")
        provenance[name] = value
    gate = f"running the approval gate on {args.request}: hashing every file it binds"
    with gate_progress(args.quiet, gate) as bar:
        approved = approve_dataset(vault, raw, policy=policy_from_args(args), progress=bar)
    written = write_approval(vault, args.out, approved, signing_keys=keys, provenance=provenance)
    s = approved.summary
    print(f"approved {approved.manifest_uri}: {s.shards} shards, {s.records:,} records, {mb(s.shard_bytes)}")
    print(f"approval {written.uri}")
    print(f"sha256   {written.sha256}")
    return 0


def _int(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise TrainVaultError(f"{flag} takes a whole number, got {text!r}") from None


def _fraction(text: str, flag: str) -> tuple[int, int]:
    n, sep, d = text.partition("/")
    return _int(n, flag), _int(d, flag) if sep else 1


def policy_from_args(args: argparse.Namespace) -> Any:
    """The `ApprovalPolicy` the scanner and exclusion options ask for. Option values are
    parsed here, not by argparse, so a bad one fails like any other error: one line, exit 1."""
    from trainvault.approval.policy import ApprovalPolicy

    seed = None if args.rescan_seed is None else _int(args.rescan_seed, "--rescan-seed")
    options: dict[str, Any] = {
        "allow_exclusions": args.allow_exclusions,
        "rescan_seed": seed,
        "unscanned_fields": args.unscanned_field or (),
    }
    if not args.scanner_key and (args.scanner_threshold is not None or args.rescan is not None):
        # Without scanner keys the gate re-scans every shard; ignoring these would mislead.
        raise TrainVaultError(
            "--scanner-threshold and --rescan apply to scanner keys: pass --scanner-key as well "
            "(without scanner keys the gate re-scans every shard)"
        )
    if args.scanner_key:
        threshold = 1 if args.scanner_threshold is None else _int(args.scanner_threshold, "--scanner-threshold")
        options.update(scanner_keys=args.scanner_key, scanner_threshold=threshold)
    if args.max_excluded is not None:
        if not args.allow_exclusions:
            raise TrainVaultError("--max-excluded applies to exclusions: pass --allow-exclusions as well")
        options["max_excluded_fraction"] = _fraction(args.max_excluded, "--max-excluded (N/D)")
    if args.max_removed is not None:
        options["max_removed_fraction"] = _fraction(args.max_removed, "--max-removed (N/D)")
    if args.rescan is not None:
        least, share = args.rescan
        flag = "--rescan (MIN_SHARDS PERCENT or N/D)"
        options["rescan_min_shards"] = _int(least, flag)
        options["rescan_fraction"] = _fraction(share, flag) if "/" in share else (_int(share, flag), 100)
    return ApprovalPolicy(**options)


def add_policy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scanner-key",
        action="append",
        help="public key trusted to sign reports and scan manifests "
        "(repeatable); without one the gate re-scans every shard",
    )
    p.add_argument(
        "--scanner-threshold", metavar="N", help="signatures required from distinct scanner keys (default 1)"
    )
    p.add_argument(
        "--rescan",
        nargs=2,
        metavar=("MIN_SHARDS", "PERCENT"),
        help="with scanner keys, re-scan max(MIN_SHARDS, PERCENT%% of the shards); PERCENT may be a fraction N/D; "
        "0 0 disables (default 2 2)",
    )
    p.add_argument("--rescan-seed", metavar="N", help="seed of the re-scan sample (default: random, recorded)")
    p.add_argument("--allow-exclusions", action="store_true", help="accept a request that binds exclusions")
    p.add_argument("--max-excluded", metavar="N/D", help="largest fraction of records excluded (default 1/100)")
    p.add_argument(
        "--max-removed", metavar="N/D", help="largest fraction of records amendments take down (default 1/100)"
    )
    p.add_argument(
        "--unscanned-field",
        action="append",
        metavar="NAME",
        help="a record field (dotted path, e.g. meta.title) that may carry text the verifier contract does "
        "not scan, because the trainer never trains on it (repeatable; default: none, such a field is "
        "denied)",
    )


def cmd_exclusions(args: argparse.Namespace) -> int:
    from trainvault.approval.attestation import read_attested
    from trainvault.approval.request import ApprovalRequest
    from trainvault.canonical import sha256_hex
    from trainvault.contamination.exclusions import EXCLUSIONS_SIDECAR, exclusions_from_report
    from trainvault.contamination.report import ContaminationReport
    from trainvault.publication.bound import write_document
    from trainvault.refs import ObjectRef

    if bool(args.request) != bool(args.request_out):
        raise TrainVaultError("--request and --request-out go together: the request to extend and where to write it")
    vault = vault_from_env()
    raw = vault.storage.get_document(args.report)
    request = None
    if args.request:
        request = ApprovalRequest.from_json_bytes(vault.storage.get_document(args.request), source=args.request)
        if request.contamination_report.sha256 != sha256_hex(raw):
            raise TrainVaultError(
                f"{args.request} binds report {request.contamination_report.sha256}, not "
                f"{args.report}; pass the report the request binds"
            )
    # Only which records to leave out is taken from it: the gate checks the report itself.
    report = read_attested(raw, ContaminationReport, trusted_keys=None, source=args.report).document
    written = write_document(vault.storage, args.out, exclusions_from_report(report, report_sha256=sha256_hex(raw)))
    per = written.document.per_benchmark()
    print(f"excluded {len(written.document.records)} records" + "".join(f"; {b}: {n}" for b, n in per.items()))
    print(f"exclusions {written.uri}")
    print(f"sha256     {written.sha256}")
    if request is not None:
        sidecars = {**request.sidecars, EXCLUSIONS_SIDECAR: ObjectRef(uri=written.uri, sha256=written.sha256)}
        bound = write_document(vault.storage, args.request_out, request.model_copy(update={"sidecars": sidecars}))
        print(f"request    {bound.uri} (binds the exclusions)")
    return 0


def open_verified(vault: Any, args: argparse.Namespace) -> Any:
    """The approval `args` name, opened as a trainer opens it: pinned sha256, trusted keys, what it
    binds checked by digest (with ``--full``: the gate again, every byte hashed, under a bar)."""
    from trainvault.approval.record import open_approved

    full = bool(getattr(args, "full", False))
    shown: AbstractContextManager[Any]
    if full:
        shown = gate_progress(args.quiet, f"auditing {args.approval}: hashing every file it binds")
    else:
        shown = nullcontext() if args.quiet else waiting(f"checking {args.approval} and the documents it binds")
    with shown as bar:
        return open_approved(
            vault,
            args.approval,
            args.sha256,
            trusted_keys=args.trusted_key,
            threshold=args.threshold,
            policy=policy_from_args(args),
            audit=full,
            progress=bar,
            revocations=revocation_source(args),
            amendments=amendment_source(args),
        )


def cmd_verify(args: argparse.Namespace) -> int:
    vault = vault_from_env()
    approved = open_verified(vault, args)
    s = approved.summary
    signers = ", ".join(k[:16] for k in approved.approval.signers) if approved.approval else "-"
    checked = (
        f"{s.files_hashed} files hashed"
        if args.full
        else "its documents checked by sha256 and its shards' sizes listed (--full hashes every byte)"
    )
    print(
        f"verified {approved.manifest_uri} (sha256 {approved.manifest_sha256}): {s.shards} shards, "
        f"{s.records:,} records, {mb(s.shard_bytes)}; {checked}; signed by {signers}"
    )
    if s.policy is not None:
        print("approved under:\n" + "\n".join(f"  {line}" for line in s.policy.describe()))
    _print_revocations(vault, args, approved.approval.sha256 if approved.approval else args.sha256)
    chain = approved.amendments
    if chain is not None:
        print(
            f"amended: {len(chain.amendments)} amendment(s) remove {len(chain.removed)} records; latest {chain.latest.uri}"
        )
    return 0


def revocation_source(args: argparse.Namespace) -> Any:
    """The revocation source ``--revocations PREFIX`` or ``--revocation FILE`` names (None: neither)."""
    prefix, files = getattr(args, "revocations", None), getattr(args, "revocation", None)
    if prefix and files:
        raise TrainVaultError("pass --revocations PREFIX or --revocation FILE, not both")
    return prefix or files or None


def _print_revocations(vault: Any, args: argparse.Namespace, sha256: str) -> None:
    """Say what the revocation check found (the open already refused a revoked approval)."""
    from trainvault.approval.revocation import find_revocations

    source = revocation_source(args)
    if source is None:
        print("revocations: not checked (pass --revocations PREFIX or --revocation FILE)")
        return
    found = find_revocations(vault, source, sha256, trusted_keys=args.trusted_key, threshold=args.threshold)
    print(f"revocations: not revoked ({len(found)} found in {source}, none counts)")
    for f in found:
        print(f"  ignored {f.uri}: {f.ignored}")


def cmd_revoke(args: argparse.Namespace) -> int:
    from trainvault.approval.keys import load_signing_key
    from trainvault.approval.revoke import revoke

    keys = [load_signing_key(k) for k in args.signing_key] if args.signing_key else [load_signing_key()]
    written = revoke(vault_from_env(), args.approval, reason=args.reason, signing_keys=keys, prefix=args.out)
    print(f"revoked  {written.revocation.approval_uri} (sha256 {written.revocation.approval_sha256})")
    print(f"reason   {written.revocation.reason}")
    print(f"revocation {written.uri}")
    print(f"sha256   {written.sha256}")
    return 0


def cmd_croissant(args: argparse.Namespace) -> int:
    from trainvault.cards.croissant import write_croissant

    vault = vault_from_env()
    approved = open_verified(vault, args)
    about = {
        "name": args.name,
        "description": args.description,
        "license": args.license,
        "cite_as": args.cite_as,
        "version": args.dataset_version,
        "date_published": args.date_published,
    }
    with waiting(f"reading the {approved.summary.records:,} approved records to declare the card's fields"):
        card = write_croissant(vault, approved, args.out, **about)
    print(f"croissant {card.uri}")
    print(f"sha256    {card.sha256}")
    return 0


def cmd_croissant_check(args: argparse.Namespace) -> int:
    from trainvault.cards.card_files import check_card

    with waiting(f"hashing every file {args.card} lists"):
        files = check_card(vault_from_env().storage, args.card)
    bad = [f for f in files if not f.ok]
    for f in files:
        print(f"{'ok' if f.ok else 'MISMATCH'}\t{f.uri}" + ("" if f.ok else f"\t{f.problem()}"))
    if bad:
        raise TrainVaultError(
            f"{len(bad)} of {len(files)} files of {args.card} do not match the sha256 and size the card states "
            "(listed above): a Croissant reader would read them unchecked; do not hand this card out"
        )
    return 0


def add_approval_arguments(p: argparse.ArgumentParser) -> None:
    """An approval record as a trainer opens it: URI, pinned sha256, trusted keys, threshold."""
    p.add_argument("approval", help="approval record URI or path")
    p.add_argument("--sha256", required=True, help="the approval's pinned sha256")
    p.add_argument("--trusted-key", action="append", required=True, help="trusted public key file (repeatable)")
    p.add_argument("--threshold", type=int, default=1, help="signatures required from distinct trusted keys")
    p.add_argument("--quiet", action="store_true", help="no progress bar or notice")
    add_policy_options(p)


def add_approval_parsers(sub: Any) -> None:
    p = sub.add_parser("keygen", help="generate a key pair: OUT.key (private) and OUT.pub")
    p.add_argument("--out", required=True, help="path prefix of the two files")
    p.add_argument(
        "--type",
        choices=("ed25519", "ecdsa-p256"),
        default="ed25519",
        help="ed25519 (default) signs approvals; ecdsa-p256 signs OMS exports (`trainvault oms-export`)",
    )
    p.set_defaults(run=cmd_keygen)

    p = sub.add_parser("approve", help="run the gate on a request file and write a signed approval")
    p.add_argument("request", help="approval request JSON (URI or path)")
    p.add_argument("--out", required=True, help="URI or path of the approval record to write")
    p.add_argument(
        "--signing-key", action="append", help="private signing key file (repeatable); default $TRAINVAULT_SIGNING_KEY"
    )
    p.add_argument("--provenance", action="append", metavar="NAME=VALUE", help="recorded in the approval")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_policy_options(p)
    p.set_defaults(run=cmd_approve, takes=reads(Takes("approve", "request", ("approval-request",))))

    p = sub.add_parser(
        "verify", help="verify an approval record and what it binds (--full: re-run the gate, hashing every byte)"
    )
    add_approval_arguments(p)
    p.add_argument("--full", action="store_true", help="audit: re-run the gate (every byte hashed, a re-scan)")
    p.add_argument(
        "--revocations", metavar="PREFIX", help="refuse the approval if a revocation under PREFIX counts against it"
    )
    p.add_argument(
        "--revocation", action="append", metavar="FILE", help="a revocation file to check against it (repeatable)"
    )
    add_amendment_options(p)
    p.set_defaults(run=cmd_verify, takes=reads(Takes("verify", "approval", ("approval-record",))))

    p = sub.add_parser("revoke", help="sign and write a revocation of an approval record, with a reason")
    p.add_argument("approval", help="approval record URI or path")
    p.add_argument("--reason", required=True, help="why the approval is withdrawn (recorded and shown to trainers)")
    p.add_argument(
        "--signing-key", action="append", help="private signing key file (repeatable); default $TRAINVAULT_SIGNING_KEY"
    )
    p.add_argument("--out", metavar="PREFIX", help="revocation prefix (default: revocations/ beside the record)")
    p.set_defaults(run=cmd_revoke, takes=reads(Takes("revoke", "approval", ("approval-record",))))

    p = sub.add_parser(
        "croissant-check",
        help="hash every file a Croissant card lists against the sha256 and size it states (exit 1 on a mismatch)",
    )
    p.add_argument("card", help="the card's URI or path (croissant.json)")
    p.set_defaults(run=cmd_croissant_check, takes=reads(Takes("croissant-check", "card", ("croissant-card",))))

    p = sub.add_parser("croissant", help="write the Croissant card (JSON-LD) of a verified approval")
    add_approval_arguments(p)
    p.add_argument("--out", help="URI or path of the card (default: croissant.json beside the approval record)")
    for flag, text in [
        ("--name", "dataset name (default: the name of the folder that holds the data manifest)"),
        ("--description", "dataset description (default: what the approval binds)"),
        ("--license", "license URL or name"),
        ("--cite-as", "citation text (e.g. BibTeX)"),
        ("--dataset-version", "dataset version"),
        ("--date-published", "ISO 8601 date"),
    ]:
        p.add_argument(flag, help=text)
    p.set_defaults(run=cmd_croissant, takes=reads(Takes("croissant", "approval", ("approval-record",))))

    p = sub.add_parser(
        "exclusions",
        help="list the records a contamination report names as exclusions-v1; with "
        "--request, write a request that binds them",
    )
    p.add_argument("report", help="contamination report (signed envelope or plain) URI or path")
    p.add_argument("--out", required=True, help="URI or path of the exclusions document to write")
    p.add_argument("--request", help="an approval request binding this report")
    p.add_argument("--request-out", help="where to write that request with the exclusions bound")
    p.set_defaults(
        run=cmd_exclusions,
        takes=reads(
            Takes("exclusions", "report", ("contamination-report",)),
            Takes("exclusions --request", "request", ("approval-request",)),
        ),
    )
