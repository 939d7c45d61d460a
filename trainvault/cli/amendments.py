"""``trainvault amend`` and ``trainvault removed-reads``: takedowns after approval, and the steps
of a run that read what they removed; the amendment options `verify` takes too."""

from __future__ import annotations

import argparse
import json
from typing import Any

from trainvault.cli.approval import add_approval_arguments, open_verified
from trainvault.cli.console import vault_from_env
from trainvault.cli.options import add_amendment_options, amendment_source
from trainvault.cli.recognize import Takes, reads
from trainvault.errors import TrainVaultError


def _read_json(vault: Any, path: str, what: str) -> Any:
    raw = vault.storage.get_document(path)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise TrainVaultError(f"{path} is not JSON ({exc}); it should hold {what}") from None


def cmd_amend(args: argparse.Namespace) -> int:
    from trainvault.approval.amend import amend
    from trainvault.approval.keys import load_signing_key

    vault = vault_from_env()
    removals = _read_json(vault, args.removals, "a list of removals")
    if not isinstance(removals, list):
        raise TrainVaultError(f"{args.removals} holds a JSON {type(removals).__name__}, not a list of removals")
    keys = [load_signing_key(k) for k in args.signing_key] if args.signing_key else [load_signing_key()]
    approved = open_verified(vault, args)
    written = amend(vault, approved, removals, signing_keys=keys, prefix=args.out)
    a = written.amendment
    new = [r for r in a.removed if r.amendment == a.sequence]
    print(
        f"amendment {a.sequence} of {approved.approval.uri if approved.approval else args.approval}: removes {len(new)} records ({len(a.removed)} in all)"
    )
    print(f"amendment {written.uri}")
    print(f"sha256    {written.sha256}")
    return 0


def cmd_removed_reads(args: argparse.Namespace) -> int:
    if amendment_source(args) is None:
        raise TrainVaultError("removed-reads needs the amendments: --amendments PREFIX or --amendment FILE")
    vault = vault_from_env()
    state = _read_json(vault, args.state, "a loader state_dict")
    found = open_verified(vault, args).removed_reads(state)
    if args.json:
        print(json.dumps([vars(r) for r in found], sort_keys=True))
        return 0
    steps = sorted({r.step for r in found})
    print(f"{len(found)} removed records read, at {len(steps)} steps")
    for r in found:
        note = f" ({r.note})" if r.note else ""
        print(
            f"step {r.step} rank {r.rank} epoch {r.epoch}: {r.split}\t{r.shard}\t{r.record_index}\t{r.reason}{note}"
            f"\tamendment {r.amendment}"
        )
    return 0


def add_amendment_parsers(sub: Any) -> None:
    p = sub.add_parser("amend", help="sign and write the next amendment of an approval, removing records")
    add_approval_arguments(p)
    add_amendment_options(p)
    p.add_argument(
        "--removals",
        required=True,
        help='JSON list: {"split", "reason", "note"?, and "shard" + "record_index" or "record_id"} each',
    )
    p.add_argument(
        "--signing-key", action="append", help="private signing key file (repeatable); default $TRAINVAULT_SIGNING_KEY"
    )
    p.add_argument("--out", metavar="PREFIX", help="amendment prefix (default: amendments/ beside the record)")
    p.set_defaults(run=cmd_amend, takes=reads(Takes("amend", "approval", ("approval-record",))))

    p = sub.add_parser(
        "removed-reads", help="the steps of a run (from its saved state) that read records later removed"
    )
    add_approval_arguments(p)
    add_amendment_options(p)
    p.add_argument("--state", required=True, help="a loader state_dict saved as JSON")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(
        run=cmd_removed_reads,
        takes=reads(
            Takes("removed-reads", "approval", ("approval-record",)),
            Takes("removed-reads --state", "state", ("loader-state",)),
        ),
    )
