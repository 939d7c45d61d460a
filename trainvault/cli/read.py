"""``trainvault read SOURCE``: read a split through the training loader, every block verified, with a
live line of what the loader waits for (on a terminal) and a summary at the end. SOURCE is an
approval record (with ``--sha256`` and ``--trusted-key``: the approved loader) or a data manifest
(ungated: the manifest as stored)."""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import Any, TextIO

from trainvault.cli.approval import add_policy_options, open_verified
from trainvault.cli.console import vault_from_env
from trainvault.cli.options import add_stage_option
from trainvault.cli.recognize import Takes

#: Redraws of the live line per second, at most.
REDRAWS_PER_S = 5


def live_line(figures: dict[str, Any], records: int, seconds: float) -> str:
    """One line: steps, records, rate, the window's data wait share and its stage seconds."""
    w = figures["window"]
    share = w["data_wait_s"] / w["wall_s"] if w["wall_s"] > 0 else 0.0
    stages = " ".join(f"{s} {w[f'{s}_s']:.2f}" for s in ("fetch", "verify", "decompress", "decode", "collate"))
    return (
        f"step {figures['step'] + 1:,}  {records:,} records  {records / max(seconds, 1e-9):,.0f} rec/s  "
        f"data wait {share:.0%} of the last {w['steps']} steps  | s: {stages}  {w['bytes'] / 1e6:,.1f} MB"
    )


def _takes(args: argparse.Namespace) -> tuple[Takes, ...]:
    """What `read` reads as SOURCE: an approval record with --sha256 or --trusted-key, else a data manifest."""
    if args.sha256 or args.trusted_key:
        return (
            Takes("read", "source", ("approval-record",), ", or a data manifest without --sha256 and --trusted-key"),
        )
    return (Takes("read", "source", ("data-manifest",), ", or an approval record with --sha256 and --trusted-key"),)


def _factory(args: argparse.Namespace) -> Any:
    """The approved loader factory of the approval `args` name, else the ungated one of the manifest."""
    from trainvault.errors import ConfigurationError, UngatedDataWarning
    from trainvault.loading import Observability

    options = {
        "collate_fn": list,
        "dataloader_args": {"batch_size": args.batch_size, "num_workers": args.workers},
        "shuffle": args.shuffle,
        "seed": args.seed,
        "rank": args.rank,
        "world_size": args.world_size,
        "observe": Observability(window_steps=args.window, watchdog_s=args.watchdog),
    }
    vault = vault_from_env()
    if args.sha256 or args.trusted_key:
        if not (args.sha256 and args.trusted_key):
            raise ConfigurationError("read APPROVAL needs both --sha256 (its pinned sha256) and --trusted-key")
        args.approval = args.source
        return open_verified(vault, args).loader_factory(**options)
    with warnings.catch_warnings():
        # The command's help says it reads the manifest as stored, no approval: the warning is
        # for Python callers who might take the ungated factory for the gated one.
        warnings.simplefilter("ignore", UngatedDataWarning)
        return vault.ungated_loader_factory(args.source, **options)


def cmd_read(args: argparse.Namespace) -> int:
    loader = _factory(args).load(args.split, curriculum_stages=args.stage)
    out: TextIO = sys.stderr
    live = getattr(out, "isatty", lambda: False)()
    records, waited, last_draw = 0, 0.0, 0.0
    started = time.perf_counter()
    for step, batch in enumerate(loader):
        records += len(batch)
        figures = loader.figures()
        waited += figures["data_wait_s"]
        now = time.perf_counter()
        if live and now - last_draw >= 1 / REDRAWS_PER_S:
            last_draw = now
            out.write("\r\x1b[K" + live_line(figures, records, now - started))
            out.flush()
        if args.steps is not None and step + 1 >= args.steps:
            break
    took = time.perf_counter() - started
    if live:
        out.write("\n")
    print(
        f"read {records:,} records of split {args.split!r} in {took:.2f} s ({records / max(took, 1e-9):,.0f} rec/s), "
        f"every block verified; waited {waited:.2f} s for data"
    )
    return 0


def add_read_parser(sub: Any) -> None:
    p = sub.add_parser(
        "read",
        help="read a split of an approval (or, without the gate, of a manifest as stored) through the training "
        "loader (every block verified), showing what it waits for",
    )
    p.add_argument(
        "source", help="approval record URI or path (with --sha256 and --trusted-key), else a data manifest URI"
    )
    p.add_argument("--sha256", help="the approval's pinned sha256")
    p.add_argument("--trusted-key", action="append", help="trusted public key file (repeatable)")
    p.add_argument("--threshold", type=int, default=1, help="signatures required from distinct trusted keys")
    p.add_argument("--quiet", action="store_true", help="no progress bar while the approval is verified")
    p.add_argument("--shuffle", action="store_true", help="shuffle (the loader's windowed shuffle)")
    p.add_argument("--seed", type=int, default=0, help="the shuffle seed")
    p.add_argument("--rank", type=int, default=None, help="read this rank's share (default 0)")
    p.add_argument("--world-size", type=int, default=None, help="of this many ranks (default 1)")
    p.add_argument("--split", default="train")
    add_stage_option(p)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    p.add_argument("--steps", type=int, default=None, help="stop after this many batches")
    p.add_argument("--window", type=int, default=100, help="steps the live figures sum over")
    p.add_argument(
        "--watchdog", type=float, default=None, help="log every thread's stack after this many seconds without a batch"
    )
    add_policy_options(p)
    p.set_defaults(run=cmd_read, takes=_takes)
