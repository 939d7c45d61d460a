"""The ``trainvault`` command: inspect a manifest, generate keys, exclude contaminated records,
approve, verify an approval, write its Croissant card, trace the records of a training step.

S3 settings come from ``TRAINVAULT_S3_URL``, ``TRAINVAULT_S3_REGION``, ``TRAINVAULT_S3_KEY_ID`` and
``TRAINVAULT_S3_SECRET`` (`StorageConfig.from_env`). Failures end with one line,
``trainvault: error: ...``, and exit with status 1; ``inspect`` exits 3 when shard entries do
not match their completion descriptors. Waits of more than a second are announced on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict
from typing import Any

from trainvault.errors import TrainVaultError

#: `inspect`: the manifest lists shards that their completion descriptors do not back.
EXIT_MISMATCH = 3
#: Seconds of waiting before the command says what it waits for.
NOTICE_AFTER_S = 1.0


def _vault() -> Any:
    from trainvault.client import TrainVault

    return TrainVault.from_env()


def _say(text: str) -> None:
    print(f"trainvault: {text}", file=sys.stderr, flush=True)


@contextmanager
def _waiting(text: str) -> Iterator[None]:
    """Say ``text ...`` on stderr if the block still runs after `NOTICE_AFTER_S`."""
    timer = threading.Timer(NOTICE_AFTER_S, _say, (f"{text} ...",))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@contextmanager
def _announcing_storage_waits() -> Iterator[None]:
    """While the command runs, say which S3 endpoint it is still connecting to after a second,
    and show storage retries and resumes (logged at INFO, never with credentials)."""
    from trainvault.storage import CONTACTS

    stop, announced = threading.Event(), set()

    def watch() -> None:
        while not stop.wait(0.1):
            for endpoint, seconds in CONTACTS.waiting().items():
                if seconds >= NOTICE_AFTER_S and endpoint not in announced:
                    announced.add(endpoint)
                    _say(f"connecting to {endpoint} ...")

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("trainvault: %(message)s"))
    logger = logging.getLogger("trainvault.storage")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    watcher = threading.Thread(target=watch, name="trainvault-connecting", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        logger.removeHandler(handler)
        logger.setLevel(level)


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} B"


def cmd_inspect(args: argparse.Namespace) -> int:
    from trainvault.publication.reader import check_descriptors

    vault = _vault()
    manifest = vault.load_manifest(args.manifest)
    shards = sum(len(split.shards) for split in manifest.splits.values())
    with _waiting(f"checking {shards} shard descriptors against the manifest"):
        mismatches = check_descriptors(vault.storage, manifest)
    summary = manifest.summary()
    if args.json:
        summary["mismatches"] = [asdict(m) for m in mismatches]
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        _print_summary(args.manifest, summary)
        for m in mismatches:
            print(f"  MISMATCH split {m.split} shard {m.key}: {m.problem}")
    if not mismatches:
        return 0
    _say(
        f"error: {len(mismatches)} of {shards} shard entries do not match their completion descriptors "
        f"(listed above); do not train on {args.manifest}"
    )
    return EXIT_MISMATCH


def _print_summary(uri: str, summary: dict[str, Any]) -> None:
    print(f"manifest {uri}")
    print(f"  sha256 {summary['sha256']}  format {summary['data_format']}")
    for name, split in sorted(summary["splits"].items()):
        print(f"  split {name}: {split['shards']} shards, {split['records']:,} records, {_mb(split['bytes'])}")
        for stage, st in sorted(split["stages"].items()):
            label = "(no stage)" if stage == "_" else stage
            print(f"    stage {label}: {st['shards']} shards, {st['records']:,} records, {_mb(st['bytes'])}")
        for cur, n in sorted(split["curricula"].items()):
            print(f"    curriculum {cur}: {n} shards")


def cmd_keygen(args: argparse.Namespace) -> int:
    from trainvault.approval.keys import write_keypair

    private, public, key = write_keypair(args.out)
    print(f"private key {private} (keep it secret; mode 0600)")
    print(f"public key  {public}")
    print(f"keyid       {key.keyid}")
    return 0


@contextmanager
def _gate_progress(quiet: bool, text: str) -> Iterator[Any]:
    """The hashing bar on a terminal; elsewhere `text` once, if the gate runs over a second."""
    from trainvault.approval.progress import terminal_hash_progress

    bar = None if quiet else terminal_hash_progress("hashing")
    with _waiting(text) if bar is None and not quiet else nullcontext():
        yield bar


def cmd_approve(args: argparse.Namespace) -> int:
    from trainvault.approval.gate import approve_dataset
    from trainvault.approval.keys import load_signing_key
    from trainvault.approval.record import write_approval

    vault = _vault()
    keys = [load_signing_key(k) for k in args.key] if args.key else [load_signing_key()]
    raw = vault.storage.get_document(args.request)
    provenance: dict[str, str] = {}
    for item in args.provenance or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise TrainVaultError(f"--provenance takes NAME=VALUE, got {item!r}")
        provenance[name] = value
    gate = f"running the approval gate on {args.request}: hashing every file it binds"
    with _gate_progress(args.quiet, gate) as bar:
        approved = approve_dataset(vault, raw, policy=_policy(args), progress=bar)
    written = write_approval(vault, args.out, approved, signing_keys=keys, provenance=provenance)
    s = approved.summary
    print(f"approved {approved.manifest_uri}: {s.shards} shards, {s.records:,} records, {_mb(s.shard_bytes)}")
    print(f"approval {written.uri}")
    print(f"sha256   {written.sha256}")
    return 0


def _fraction(text: str) -> tuple[int, int]:
    n, sep, d = text.partition("/")
    try:
        return int(n), int(d) if sep else 1
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N/D, got {text!r}") from None


def _policy(args: argparse.Namespace) -> Any:
    """The `ApprovalPolicy` the scanner and exclusion options ask for."""
    from trainvault.approval.policy import ApprovalPolicy

    options: dict[str, Any] = {"allow_exclusions": args.allow_exclusions, "rescan_seed": args.rescan_seed}
    if args.scanner_key:
        options.update(scanner_keys=args.scanner_key, scanner_threshold=args.scanner_threshold)
    if args.max_excluded is not None:
        options["max_excluded_fraction"] = args.max_excluded
    if args.rescan is not None:
        options.update(rescan_min_shards=args.rescan[0], rescan_fraction=(args.rescan[1], 100))
    return ApprovalPolicy(**options)


def _add_policy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scanner-key", action="append", help="public key trusted to sign reports and scan manifests "
                   "(repeatable); without one the gate re-scans every shard")
    p.add_argument("--scanner-threshold", type=int, default=1, help="signatures required from distinct scanner keys")
    p.add_argument("--rescan", type=int, nargs=2, metavar=("MIN_SHARDS", "PERCENT"),
                   help="with scanner keys, re-scan max(MIN_SHARDS, PERCENT%% of the shards); 0 0 disables (default 2 2)")
    p.add_argument("--rescan-seed", type=int, help="seed of the re-scan sample (default: random, recorded)")
    p.add_argument("--allow-exclusions", action="store_true", help="accept a request that binds exclusions")
    p.add_argument("--max-excluded", type=_fraction, metavar="N/D", help="largest fraction of records excluded "
                   "(default 1/100)")


def cmd_exclusions(args: argparse.Namespace) -> int:
    from trainvault.approval.attestation import read_attested
    from trainvault.approval.request import ApprovalRequest
    from trainvault.canonical import sha256_hex
    from trainvault.contamination.exclusions import EXCLUSIONS_SIDECAR, exclusions_from_report
    from trainvault.contamination.report import ContaminationReport
    from trainvault.publication.bound import publish_document
    from trainvault.refs import ArtifactRef

    if bool(args.request) != bool(args.request_out):
        raise TrainVaultError("--request and --request-out go together: the request to extend and where to write it")
    vault = _vault()
    raw = vault.storage.get_document(args.report)
    request = None
    if args.request:
        request = ApprovalRequest.from_json_bytes(vault.storage.get_document(args.request), source=args.request)
        if request.contamination_report.sha256 != sha256_hex(raw):
            raise TrainVaultError(f"{args.request} binds report {request.contamination_report.sha256}, not "
                                  f"{args.report}; pass the report the request binds")
    # Only which records to leave out is taken from it: the gate checks the report itself.
    report = read_attested(raw, ContaminationReport, trusted_keys=None, source=args.report).document
    written = publish_document(vault.storage, args.out, exclusions_from_report(report, report_sha256=sha256_hex(raw)))
    per = written.document.per_benchmark()
    print(f"excluded {len(written.document.records)} records" + "".join(f"; {b}: {n}" for b, n in per.items()))
    print(f"exclusions {written.uri}")
    print(f"sha256     {written.sha256}")
    if request is not None:
        sidecars = {**request.sidecars, EXCLUSIONS_SIDECAR: ArtifactRef(uri=written.uri, sha256=written.sha256)}
        bound = publish_document(vault.storage, args.request_out, request.model_copy(update={"sidecars": sidecars}))
        print(f"request    {bound.uri} (binds the exclusions)")
    return 0


def _open_verified(vault: Any, args: argparse.Namespace) -> Any:
    """The approval `args` name, opened as a trainer opens it: pinned sha256, trusted keys, the gate again."""
    from trainvault.approval.record import open_approved

    with _gate_progress(args.quiet, f"verifying {args.approval}: hashing every file it binds") as bar:
        return open_approved(vault, args.approval, args.sha256, trusted_keys=args.key,
                             threshold=args.threshold, policy=_policy(args), progress=bar)


def cmd_verify(args: argparse.Namespace) -> int:
    approved = _open_verified(_vault(), args)
    s = approved.summary
    signers = ", ".join(k[:16] for k in approved.approval.signers) if approved.approval else "-"
    print(f"verified {approved.manifest_uri} (sha256 {approved.manifest_sha256}): {s.shards} shards, "
          f"{s.records:,} records, {_mb(s.shard_bytes)}; {s.files_hashed} files hashed; signed by {signers}")
    return 0


def cmd_croissant(args: argparse.Namespace) -> int:
    from trainvault.cards.croissant import write_croissant

    vault = _vault()
    approved = _open_verified(vault, args)
    about = {"name": args.name, "description": args.description, "license": args.license,
             "cite_as": args.cite_as, "version": args.dataset_version, "date_published": args.date_published}
    with _waiting(f"reading the {approved.summary.records:,} approved records to declare the card's fields"):
        card = write_croissant(vault, approved, args.out, **about)
    print(f"croissant {card.uri}")
    print(f"sha256    {card.sha256}")
    return 0


def _read_json(path: str, what: str) -> dict[str, Any]:
    from trainvault.errors import ConfigurationError

    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{path} is not JSON ({exc}); it should hold {what}") from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{path} holds a JSON {type(value).__name__}; it should hold {what}")
    return value


def _trace_loader(args: argparse.Namespace, state: Any) -> Any:
    """The DataLoader to trace: the approved one, or the one the state's manifest and order describe."""
    if state is not None:
        ident = state.identity
        split, stages = ident.split, list(ident.curriculum_stages) if ident.curriculum_stages else None
        batch = {"batch_size": state.batch_size, "drop_last": state.remainder == "drop"}
    else:
        split, stages = args.split, args.stage
        batch = {"batch_size": args.batch_size, "drop_last": args.drop_last}
    if args.approval:
        from trainvault.approval.record import open_approved

        if not args.sha256 or not args.key:
            raise TrainVaultError("trace APPROVAL needs --sha256 (the approval's pinned sha256) and --key")
        with _waiting(f"verifying {args.approval}: hashing every file it binds"):
            approved = open_approved(_vault(), args.approval, args.sha256, trusted_keys=args.key,
                                     threshold=args.threshold)
        return approved.split_data_loader(dataloader_args=batch).load(split, curriculum_stages=stages)
    from trainvault.errors import ResumeStateError
    from trainvault.loading import SplitDataLoader

    if state is None:
        raise TrainVaultError("trace needs an APPROVAL or --state STATE.json")
    if state.manifest_uri is None:
        raise ResumeStateError(f"{args.state} names no manifest (a version 1 state): give the APPROVAL too")
    exclude = None if args.exclude is None else _read_json(args.exclude, "the loader's exclude mapping")
    return SplitDataLoader(
        _vault().storage, state.manifest_uri, shuffle=ident.shuffle, seed=ident.seed,
        shuffle_window_blocks=ident.shuffle_window_blocks, dataloader_args=batch, exclude=exclude,
    ).load(split, curriculum_stages=stages)


def cmd_trace(args: argparse.Namespace) -> int:
    from trainvault.errors import ConfigurationError
    from trainvault.loading.order import Redeal
    from trainvault.loading.state import LoaderState
    from trainvault.loading.trace import trace_batch

    raw = _read_json(args.state, "a loader state_dict") if args.state else None
    state = None if raw is None else LoaderState.from_dict(raw)
    if args.batch_size < 1 or args.world_size < 1:
        raise ConfigurationError(
            f"--batch-size and --world-size must be >= 1, got {args.batch_size}, {args.world_size}"
        )
    loader = _trace_loader(args, state)
    read = args.records or not args.positions
    rank = args.rank if args.rank is not None else 0
    if raw is not None:
        loader.load_state_dict(raw)  # checks manifest sha256, selection, order and exclusions
        traced = loader.trace_step(args.step, rank, read=read)
    else:  # a run of --batch-size on --world-size ranks from its first step
        history = [Redeal(0, 0, 0, args.batch_size, args.world_size, args.drop_last)]
        traced = trace_batch(loader.split_dataset, args.split, history, args.step, rank, read=read)
    rows = [{"split": t.split, "shard": t.shard, "record_index": t.record_index, "id": t.id} for t in traced.records]
    if args.records and traced.data is not None:
        for row, record in zip(rows, traced.data):
            row["record"] = record
    if args.json:
        print(json.dumps({"step": traced.step, "rank": rank, "epoch": traced.epoch, "records": rows},
                         default=_jsonable, sort_keys=True))
        return 0
    print(f"step {traced.step} rank {rank} epoch {traced.epoch}: {len(rows)} records")
    for row in rows:
        extra = f"\t{json.dumps(row['record'], default=_jsonable, sort_keys=True)}" if "record" in row else ""
        ident = json.dumps(row["id"], default=_jsonable)
        print(f"{row['split']}\t{row['shard']}\t{row['record_index']}\t{ident}{extra}")
    return 0


def _jsonable(value: Any) -> Any:
    """Arrays as lists, bytes as hex: what a record may hold besides JSON."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def add_trace_parser(sub: Any) -> None:
    p = sub.add_parser("trace", help="the records of training step N (shard key, record index, id), per rank")
    p.add_argument("approval", nargs="?", help="approval record URI or path (else --state names the manifest)")
    p.add_argument("--sha256", help="the approval's pinned sha256")
    p.add_argument("--key", action="append", help="trusted public key file (repeatable)")
    p.add_argument("--threshold", type=int, default=1, help="signatures required from distinct trusted keys")
    p.add_argument("--state", help="a loader state_dict saved as JSON: the run's selection, order and history")
    p.add_argument("--exclude", help="with --state and no APPROVAL: the loader's exclude mapping as JSON")
    p.add_argument("--split", default="train", help="without --state: the split (default train)")
    p.add_argument("--stage", action="append", help="without --state: a curriculum stage (repeatable: a union)")
    p.add_argument("--batch-size", type=int, default=1, help="without --state: the run's batch size")
    p.add_argument("--world-size", type=int, default=1, help="without --state: the run's number of ranks")
    p.add_argument("--drop-last", action="store_true", help="without --state: the run dropped each epoch's tail")
    p.add_argument("--step", type=int, required=True, help="the step (0: the run's first batch)")
    p.add_argument("--rank", type=int, help="the rank (default 0)")
    p.add_argument("--records", action="store_true", help="print each record too, read and verified")
    p.add_argument("--positions", action="store_true", help="read no data: shard and record index only (id -)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=cmd_trace)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainvault", description="Custody chain for model-training data.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="splits, stages, shards, records and bytes of a data manifest; checks "
                       "each shard descriptor against it (exit 3 on a mismatch)")
    p.add_argument("manifest", help="data manifest URI or path")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=cmd_inspect)

    p = sub.add_parser("keygen", help="generate an Ed25519 key pair: OUT.key (private) and OUT.pub")
    p.add_argument("--out", required=True, help="path prefix of the two files")
    p.set_defaults(run=cmd_keygen)

    p = sub.add_parser("approve", help="run the gate on a request file and write a signed approval")
    p.add_argument("request", help="approval request JSON (URI or path)")
    p.add_argument("--out", required=True, help="URI or path of the approval record to write")
    p.add_argument("--key", action="append", help="signing key file (repeatable); default $TRAINVAULT_SIGNING_KEY")
    p.add_argument("--provenance", action="append", metavar="NAME=VALUE", help="recorded in the approval")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_policy_options(p)
    p.set_defaults(run=cmd_approve)

    p = sub.add_parser("verify", help="verify an approval record and re-run the gate")
    _add_approval_arguments(p)
    p.set_defaults(run=cmd_verify)

    p = sub.add_parser("croissant", help="write the Croissant card (JSON-LD) of a verified approval")
    _add_approval_arguments(p)
    p.add_argument("--out", help="URI or path of the card (default: croissant.json beside the approval record)")
    for flag, text in [("--name", "dataset name (default: the card's folder name)"),
                       ("--description", "dataset description (default: what the approval binds)"),
                       ("--license", "license URL or name"), ("--cite-as", "citation text (e.g. BibTeX)"),
                       ("--dataset-version", "dataset version"), ("--date-published", "ISO 8601 date")]:
        p.add_argument(flag, help=text)
    p.set_defaults(run=cmd_croissant)

    p = sub.add_parser("exclusions", help="list the records a contamination report names as exclusions-v1; with "
                       "--request, write a request that binds them")
    p.add_argument("report", help="contamination report (signed envelope or plain) URI or path")
    p.add_argument("--out", required=True, help="URI or path of the exclusions document to write")
    p.add_argument("--request", help="an approval request binding this report")
    p.add_argument("--request-out", help="where to write that request with the exclusions bound")
    p.set_defaults(run=cmd_exclusions)
    add_trace_parser(sub)
    add_archive_commands(sub)
    return parser


def _add_approval_arguments(p: argparse.ArgumentParser) -> None:
    """An approval record as a trainer opens it: URI, pinned sha256, trusted keys, threshold."""
    p.add_argument("approval", help="approval record URI or path")
    p.add_argument("--sha256", required=True, help="the approval's pinned sha256")
    p.add_argument("--key", "--keys", dest="key", action="append", required=True,
                   help="trusted public key file (repeatable)")
    p.add_argument("--threshold", type=int, default=1, help="signatures required from distinct trusted keys")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_policy_options(p)


def add_archive_commands(sub: Any) -> None:
    """``trainvault archive inspect URI`` and ``trainvault archive gc POOL --grace ... [--dry-run]``."""
    from trainvault.rollouts.cli import add_archive_parser

    add_archive_parser(sub, _vault)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with _announcing_storage_waits():
            return int(args.run(args))
    except (TrainVaultError, OSError) as exc:  # OSError: a local file the command was pointed at
        message = " ".join(str(exc).split())  # one line, whatever the error held
        print(f"trainvault: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("trainvault: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
