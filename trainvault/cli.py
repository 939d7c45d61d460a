"""The ``trainvault`` command: inspect a manifest, generate keys, approve, verify an approval.

Storage settings come from the environment: ``TRAINVAULT_S3_ENDPOINT`` (or
``AWS_ENDPOINT_URL``), ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``.
Failures print one line, ``trainvault: error: ...``, and exit with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from trainvault.errors import TrainVaultError


def _vault() -> Any:
    from trainvault.client import TrainVault

    return TrainVault(
        s3_base_url=os.environ.get("TRAINVAULT_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL"),
        region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        access_key_id=os.environ.get("AWS_ACCESS_KEY_ID"),
        secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY"),
    )


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} B"


def cmd_inspect(args: argparse.Namespace) -> int:
    vault = _vault()
    summary = vault.load_manifest(args.manifest).summary()
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    print(f"manifest {args.manifest}")
    print(f"  sha256 {summary['sha256']}  format {summary['data_format']}")
    for name, split in sorted(summary["splits"].items()):
        print(f"  split {name}: {split['shards']} shards, {split['records']:,} records, {_mb(split['bytes'])}")
        for stage, st in sorted(split["stages"].items()):
            label = "(no stage)" if stage == "_" else stage
            print(f"    stage {label}: {st['shards']} shards, {st['records']:,} records, {_mb(st['bytes'])}")
        for cur, n in sorted(split["curricula"].items()):
            print(f"    curriculum {cur}: {n} shards")
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    from trainvault.approval.keys import write_keypair

    private, public, key = write_keypair(args.out)
    print(f"private key {private} (keep it secret; mode 0600)")
    print(f"public key  {public}")
    print(f"keyid       {key.keyid}")
    return 0


def _progress(quiet: bool) -> Any:
    from trainvault.approval.progress import terminal_hash_progress

    return None if quiet else terminal_hash_progress("hashing")


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
    approved = approve_dataset(vault, raw, progress=_progress(args.quiet))
    written = write_approval(vault, args.out, approved, signing_keys=keys, provenance=provenance)
    s = approved.summary
    print(f"approved {approved.manifest_uri}: {s.shards} shards, {s.records:,} records, {_mb(s.shard_bytes)}")
    print(f"approval {written.uri}")
    print(f"sha256   {written.sha256}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from trainvault.approval.record import open_approved

    vault = _vault()
    approved = open_approved(vault, args.approval, args.sha256, trusted_keys=args.key, threshold=args.threshold,
                             progress=_progress(args.quiet))
    s = approved.summary
    signers = ", ".join(k[:16] for k in approved.approval.signers) if approved.approval else "-"
    print(f"verified {approved.manifest_uri} (sha256 {approved.manifest_sha256}): {s.shards} shards, "
          f"{s.records:,} records, {_mb(s.shard_bytes)}; {s.files_hashed} files hashed; signed by {signers}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainvault", description="Custody chain for model-training data.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="splits, stages, shards, records and bytes of a data manifest")
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
    p.set_defaults(run=cmd_approve)

    p = sub.add_parser("verify", help="verify an approval record and re-run the gate")
    p.add_argument("approval", help="approval record URI or path")
    p.add_argument("--sha256", required=True, help="the approval's pinned sha256")
    p.add_argument("--key", action="append", required=True, help="trusted public key file (repeatable)")
    p.add_argument("--threshold", type=int, default=1, help="signatures required from distinct trusted keys")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=cmd_verify)
    add_archive_commands(sub)
    return parser


def add_archive_commands(sub: Any) -> None:
    """``trainvault archive inspect URI`` and ``trainvault archive gc POOL --grace ... [--dry-run]``."""
    from trainvault.rollouts.cli import add_archive_parser

    add_archive_parser(sub, _vault)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except TrainVaultError as exc:
        message = " ".join(str(exc).split())  # one line, whatever the error held
        print(f"trainvault: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("trainvault: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
