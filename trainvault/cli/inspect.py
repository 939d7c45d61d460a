"""``trainvault inspect``: a manifest's splits, stages and shards, checked against their descriptors; or
what a signed approval record approves and under which policy."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from trainvault.cli.console import mb, say, vault_from_env, waiting
from trainvault.cli.recognize import Takes, applied_policy, approved_manifest, unverified_statement, what_it_is

#: `inspect`: the manifest lists shards that their completion descriptors do not back.
EXIT_MISMATCH = 3
#: What `inspect` reads: it names any other trainvault file itself (it holds the bytes).
TAKES = Takes("inspect", "manifest", ("data-manifest", "approval-record"))


def _load(storage: Any, given: str) -> tuple[str, bytes]:
    from trainvault.uris import normalize_uri

    uri = normalize_uri(given)
    return uri, storage.get_document(uri)


def _publication(given: str, uri: str, raw: bytes) -> Any:
    """The publication in `raw`; a trainvault file of another kind is named (as `given`), with the command that reads it."""
    from trainvault.errors import ManifestError, WrongDocumentError
    from trainvault.publication.pinned import Publication

    try:
        return Publication.from_bytes(uri, raw)
    except ManifestError:
        explained = what_it_is(given, raw, TAKES)
        if explained is None:
            raise
        raise WrongDocumentError(explained) from None


def cmd_inspect(args: argparse.Namespace) -> int:
    vault = vault_from_env()
    uri, raw = _load(vault.storage, args.manifest)
    statement = unverified_statement(raw, uri)
    if statement is not None and approved_manifest(statement) is not None:
        _print_approval(uri, statement)
        return 0
    publication = _publication(args.manifest, uri, raw)
    manifest = publication.manifest
    shards = sum(len(split.shards) for split in manifest.splits.values())
    with waiting(f"checking {shards} shard descriptors against the manifest"):
        # From the descriptor pack when the manifest binds one: one read, not one per shard.
        mismatches = publication.descriptor_mismatches(vault.storage)
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
    say(
        f"error: {len(mismatches)} of {shards} shard entries do not match their completion descriptors "
        f"(listed above); do not train on {args.manifest}"
    )
    return EXIT_MISMATCH


def _print_approval(uri: str, statement: dict[str, Any]) -> None:
    """What a signed approval record says it approves, and under which policy, read without checking it."""
    bound = approved_manifest(statement)
    policy = applied_policy(statement)
    print(f"approval record {uri} (signatures not checked: `trainvault verify {uri} --sha256 ... --trusted-key ...`)")
    print(f"  approves data manifest {bound.uri} (sha256 {bound.sha256})")
    if policy is None:
        print("  approved under: not recorded (an older trainvault: open it with `trainvault verify --full`)")
        return
    print("  approved under:")
    for line in policy.describe():
        print(f"    {line}")


def _print_summary(uri: str, summary: dict[str, Any]) -> None:
    print(f"manifest {uri}")
    print(f"  sha256 {summary['sha256']}  format {summary['data_format']}")
    for name, split in sorted(summary["splits"].items()):
        print(f"  split {name}: {split['shards']} shards, {split['records']:,} records, {mb(split['bytes'])}")
        for stage, st in sorted(split["stages"].items()):
            label = "(no stage)" if stage == "_" else stage
            print(f"    stage {label}: {st['shards']} shards, {st['records']:,} records, {mb(st['bytes'])}")
        for cur, n in sorted(split["curricula"].items()):
            print(f"    curriculum {cur}: {n} shards")


def add_inspect_parser(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="splits, stages, shards, records and bytes of a data manifest; checks "
        "each shard descriptor against it (exit 3 on a mismatch)",
    )
    p.add_argument("manifest", help="data manifest URI or path")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=cmd_inspect)
