"""``trainvault archive inspect`` and ``trainvault archive gc``: registered by `trainvault.cli`."""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from trainvault.errors import ObjectNotFoundError, TrainVaultError

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``24h`` or ``7d``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r}; use e.g. 3600, 90s, 15m, 24h or 7d")
    return float(m.group(1)) * _UNITS[m.group(2)]


def add_archive_parser(sub: Any, vault: Callable[[], Any]) -> dict[str, argparse.ArgumentParser]:
    """Register ``archive inspect`` and ``archive gc`` on `sub`; `vault()` makes the TrainVault.
    Returns the two parsers by subcommand, for the command line to add its own defaults."""
    archive = sub.add_parser("archive", help="inspect rollout archives; collect unowned pool objects")
    asub = archive.add_subparsers(dest="archive_command", required=True)

    p = asub.add_parser("inspect", help="counts, keys and metadata of a rollout archive (reads no samples)")
    p.add_argument("uri", help="archive index URI or path")
    p.add_argument("--keys", type=int, default=10, metavar="N", help="print the first N keys (default 10)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=lambda args: cmd_inspect(args, vault()))
    inspect = p

    p = asub.add_parser("gc", help="delete pool objects no archive owns that are older than --grace")
    p.add_argument("pool", help="pool URI or path (default pool: rollout-pool beside the archives)")
    p.add_argument(
        "--grace", type=parse_duration, required=True, help="minimum age, e.g. 24h (at least as long as a save)"
    )
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted; change nothing")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=lambda args: cmd_gc(args, vault()))
    return {"inspect": inspect, "gc": p}


def archive_summary(uri: str, storage: Any, keys: int = 10) -> dict[str, Any]:
    """What `archive inspect` prints: index and metadata only, never a chunk."""
    from trainvault.rollouts.archive import RolloutArchive

    archive = RolloutArchive(uri, storage=storage)
    idx = archive.index
    try:
        metadata: list[dict[str, Any]] | None = RolloutArchive.check_metadata(archive.uri, storage=archive.storage)
    except ObjectNotFoundError:
        metadata = None  # written without metadata and no sidecar yet
    summary: dict[str, Any] = {
        "uri": archive.uri,
        "index_sha256": archive.index_sha256,
        "rollout_id": idx.rollout_id,
        "evaluation": idx.evaluation,
        "pool": idx.pool,
        "samples": len(idx.samples),
        "distinct_sample_keys": len({e.sample_key for e in idx.samples}),
        "tasks": len({e.task_key for e in idx.samples if e.task_key is not None}),
        "chunks": len(idx.chunks),
        "chunk_bytes": sum(c.size_bytes for c in idx.chunks),
        "keys": [list(k) for k in archive.keys()[: max(keys, 0)]],
        "metadata": None,
    }
    if metadata is not None:
        rewards = [m["reward"] for m in metadata if isinstance(m.get("reward"), (int, float))]
        statuses = Counter(str(m["status"]) for m in metadata if m.get("status") is not None)
        summary["metadata"] = {
            "samples": len(metadata),
            "rewards": len(rewards),
            "reward_mean": sum(rewards) / len(rewards) if rewards else None,
            "reward_min": min(rewards) if rewards else None,
            "reward_max": max(rewards) if rewards else None,
            "status": dict(sorted(statuses.items())),
        }
    return summary


def cmd_inspect(args: argparse.Namespace, vault: Any) -> int:
    s = archive_summary(args.uri, vault.storage, args.keys)
    if args.json:
        print(json.dumps(s, indent=2, sort_keys=True))
        return 0
    kind = "evaluation" if s["evaluation"] else "training"
    print(f"rollout archive {s['uri']}")
    print(f"  rollout {s['rollout_id']} ({kind})  index sha256 {s['index_sha256']}")
    print(f"  pool {s['pool']}")
    print(
        f"  {s['samples']:,} samples ({s['distinct_sample_keys']:,} distinct keys, {s['tasks']:,} tasks) "
        f"in {s['chunks']} chunks, {s['chunk_bytes']:,} B"
    )
    m = s["metadata"]
    if m is None:
        print("  metadata: none (build a sidecar with RolloutArchive.write_metadata_sidecar)")
    else:
        reward = (
            f"reward mean {m['reward_mean']:.4g}, min {m['reward_min']:.4g}, max {m['reward_max']:.4g} "
            f"({m['rewards']} samples)"
            if m["rewards"]
            else "no rewards"
        )
        status = ", ".join(f"{k} {v}" for k, v in m["status"].items()) or "no status"
        print(f"  metadata: {reward}; {status}")
    for sample_key, task_key in s["keys"]:
        print(f"    {sample_key}  task {task_key if task_key is not None else '-'}")
    if s["samples"] > len(s["keys"]):
        print(f"    ... {s['samples'] - len(s['keys']):,} more (--keys N)")
    return 0


def cmd_gc(args: argparse.Namespace, vault: Any) -> int:
    from trainvault.rollouts.pool import gc

    r = gc(args.pool, grace=args.grace, storage=vault.storage, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(r.__dict__, indent=2, sort_keys=True))
        return 0
    verb = "would delete" if r.dry_run else "deleted"
    print(f"pool {r.pool}: {r.objects} objects, {r.owners} owner records referencing {r.referenced}")
    print(f"  {verb} {len(r.deleted)} objects ({r.freed_bytes:,} B); kept {r.kept_young} younger than {r.grace_s:g} s")
    for uri in r.orphan_owners:
        print(f"  owner record without a published archive (kept; delete it to free its objects): {uri}")
    for uri in r.foreign:
        print(f"  not a content address (left alone): {uri}")
    if not r.complete:
        raise TrainVaultError(f"gc of {r.pool} stopped at its deadline; run it again to finish")
    return 0
