"""``trainvault trace``: the records behind one training step, from an approval or a saved loader state.

Everything that can be checked without storage is checked first (options, the step and
rank against the run's history; with an APPROVAL, the split and stages against the
manifest it names), so a mistyped argument never waits for the gate's hashing.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from trainvault.cli.approval import add_policy_options, open_verified
from trainvault.cli.console import vault_from_env
from trainvault.cli.options import add_stage_option
from trainvault.cli.recognize import Takes, approved_manifest, reads, unverified_statement
from trainvault.errors import ConfigurationError, TrainVaultError

#: Options that describe the run when no state does; a state names all of them itself.
_RUN_OPTIONS = {
    "split": "--split",
    "stage": "--stage",
    "batch_size": "--batch-size",
    "world_size": "--world-size",
    "drop_last": "--drop-last",
    "shuffle": "--shuffle",
    "seed": "--seed",
    "shuffle_window_blocks": "--shuffle-window-blocks",
}


@dataclass(frozen=True)
class _Run:
    """The run to trace: its selection, how it batched, and where it (re)started dealing."""

    split: str
    stages: list[str] | None
    batch: dict[str, Any]
    order: dict[str, Any]  # shuffle, seed, shuffle_window_blocks: LoaderPlan.create's names
    history: tuple[Any, ...]  # Redeal points, oldest first


def _read_json(path: str, what: str) -> dict[str, Any]:
    from trainvault.storage.local_file import JSON_FILE_LIMIT, read_local_file

    data = read_local_file(path, limit=JSON_FILE_LIMIT, what=what)
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested past the parser's depth
        raise ConfigurationError(f"{path} is not JSON ({type(exc).__name__}: {exc}); it should hold {what}") from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{path} holds a JSON {type(value).__name__}; it should hold {what}")
    return value


def _check_options(args: argparse.Namespace) -> None:
    """Refuse contradictory or out-of-range options; reads nothing."""
    if args.step < 0 or (args.rank is not None and args.rank < 0):
        raise ConfigurationError(
            f"--step and --rank must be >= 0 (step 0: the run's first batch), "
            f"got --step {args.step}, --rank {args.rank}"
        )
    if (args.batch_size is not None and args.batch_size < 1) or (args.world_size is not None and args.world_size < 1):
        raise ConfigurationError(
            f"--batch-size and --world-size must be >= 1, got {args.batch_size}, {args.world_size}"
        )
    if args.approval:
        if not args.sha256 or not args.trusted_key:
            raise TrainVaultError("trace APPROVAL needs --sha256 (the approval's pinned sha256) and --trusted-key")
        if args.exclude is not None:
            raise TrainVaultError("--exclude is for --state without an APPROVAL: an approval binds its own exclusions")
    elif args.state is None:
        raise TrainVaultError("trace needs an APPROVAL or --state STATE.json")
    if args.state is not None:
        given = [flag for name, flag in _RUN_OPTIONS.items() if getattr(args, name) not in (None, False)]
        if given:
            raise ConfigurationError(
                f"{' and '.join(given)} describe a run without a state; {args.state} names the "
                "run's split, stages, batch size and ranks itself: drop them"
            )
    elif args.batch_size is None:
        raise ConfigurationError(
            "trace APPROVAL without --state needs --batch-size: step N's records depend on the "
            "run's batch size (pass the trainer's, or --state with a state the run saved)"
        )


def _run(args: argparse.Namespace, state: Any) -> _Run:
    """The run `state` describes, else the one the options describe (from its first step)."""
    from trainvault.loading.order import Redeal

    if state is not None:
        ident = state.identity
        stages = list(ident.curriculum_stages) if ident.curriculum_stages else None
        batch = {"batch_size": state.batch_size, "drop_last": state.remainder == "drop"}
        order = {"shuffle": ident.shuffle, "seed": ident.seed, "shuffle_window_blocks": ident.shuffle_window_blocks}
        return _Run(ident.split, stages, batch, order, state.run_history()[1])
    world = args.world_size or 1
    if (args.rank or 0) >= world:
        raise ConfigurationError(f"--rank {args.rank} is not one of the run's {world} rank(s) (--world-size)")
    history = (Redeal(0, 0, 0, args.batch_size, world, args.drop_last),)
    batch = {"batch_size": args.batch_size, "drop_last": args.drop_last}
    order = {"shuffle": args.shuffle, "seed": args.seed or 0, "shuffle_window_blocks": args.shuffle_window_blocks}
    return _Run(args.split or "train", args.stage, batch, order, history)


def _check_selection_first(storage: Any, args: argparse.Namespace, run: _Run) -> None:
    """Refuse an unknown split or stage before the gate hashes every file: check them against the
    manifest the pinned approval record names. Its signatures are not checked here (the gate
    does that next), so anything unreadable is left for the gate to report."""
    from trainvault.canonical import sha256_hex
    from trainvault.loading.selection import select
    from trainvault.publication.pinned import Publication

    try:
        raw = storage.get_document(args.approval)
        statement = unverified_statement(raw, args.approval) if sha256_hex(raw) == args.sha256 else None
        bound = None if statement is None else approved_manifest(statement)
        if bound is None:
            return
        manifest = Publication.load(storage, bound.uri, sha256=bound.sha256).manifest
    except TrainVaultError:
        return
    select(manifest, run.split, None, run.stages)


def _trace_loader(args: argparse.Namespace, run: _Run, state: Any) -> Any:
    """The DataLoader to trace: the approved one, or the one the state's manifest and order describe."""
    vault = vault_from_env()
    if args.approval:
        _check_selection_first(vault.storage, args, run)
        approved = open_verified(vault, args)
        factory = approved.loader_factory(dataloader_args=run.batch, **run.order)
        return factory.load(run.split, curriculum_stages=run.stages)
    from trainvault.errors import ResumeStateError
    from trainvault.loading import LoaderPlan, SplitLoaderFactory

    if state.manifest_uri is None:
        raise ResumeStateError(f"{args.state} names no manifest (a version 1 state): give the APPROVAL too")
    exclude = None if args.exclude is None else _read_json(args.exclude, "the loader's exclude mapping")
    plan = LoaderPlan.create(dataloader_args=run.batch, **run.order)
    factory = SplitLoaderFactory(vault.storage, state.manifest_uri, plan, exclude=exclude)
    return factory.load(run.split, curriculum_stages=run.stages)


def cmd_trace(args: argparse.Namespace) -> int:
    from trainvault.loading.order import step_batch
    from trainvault.loading.state import LoaderState
    from trainvault.loading.trace import trace_batch

    _check_options(args)
    raw = _read_json(args.state, "a loader state_dict") if args.state else None
    state = None if raw is None else LoaderState.from_dict(raw)
    run = _run(args, state)
    rank = args.rank if args.rank is not None else 0
    if state is not None:  # the step and rank against the state's history: arithmetic, no data
        step_batch(run.history, args.step, state.epoch_records, rank)
    loader = _trace_loader(args, run, state)
    if raw is not None:
        loader.load_state_dict(raw)  # checks manifest sha256, selection, order and exclusions
    # The state's own history, never the trace loader's: this process is one rank of none of the
    # run's world sizes, and steps past the state continue at the state's batch size and ranks.
    read = args.records or not args.positions
    traced = trace_batch(loader.split_dataset, run.split, run.history, args.step, rank, read=read)
    _print(args, traced, rank)
    return 0


def _print(args: argparse.Namespace, traced: Any, rank: int) -> None:
    rows = [{"split": t.split, "shard": t.shard, "record_index": t.record_index, "id": t.id} for t in traced.records]
    if args.records and traced.data is not None:
        for row, record in zip(rows, traced.data, strict=False):
            row["record"] = record
    if args.json:
        print(
            json.dumps(
                {"step": traced.step, "rank": rank, "epoch": traced.epoch, "records": rows},
                default=_jsonable,
                sort_keys=True,
            )
        )
        return
    print(f"step {traced.step} rank {rank} epoch {traced.epoch}: {len(rows)} records")
    for row in rows:
        extra = f"\t{json.dumps(row['record'], default=_jsonable, sort_keys=True)}" if "record" in row else ""
        ident = json.dumps(row["id"], default=_jsonable)
        print(f"{row['split']}\t{row['shard']}\t{row['record_index']}\t{ident}{extra}")


def _jsonable(value: Any) -> Any:
    """Arrays as lists, bytes as hex: what a record may hold besides JSON."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def add_trace_parser(sub: Any) -> None:
    p = sub.add_parser(
        "trace",
        help="the records of training step N (shard key, record index, id), per rank",
        description="The records of training step N of one rank. From --state: the run the state "
        "describes (its selection, batch size, ranks and resumes). From an APPROVAL alone: a run of "
        "--batch-size on --world-size ranks from its first step.",
    )
    p.add_argument("approval", nargs="?", help="approval record URI or path (else --state names the manifest)")
    p.add_argument("--sha256", help="the approval's pinned sha256")
    p.add_argument("--trusted-key", action="append", help="trusted public key file (repeatable)")
    p.add_argument(
        "--threshold", type=int, default=1, help="signatures required from distinct trusted keys (default 1)"
    )
    p.add_argument("--state", help="a loader state_dict saved as JSON: the run's selection, order and history")
    p.add_argument("--exclude", help="with --state and no APPROVAL: the loader's exclude mapping as JSON")
    p.add_argument("--split", help="without --state: the split (default train)")
    add_stage_option(p, "without --state: ")
    p.add_argument("--batch-size", type=int, help="without --state: the run's batch size (required)")
    p.add_argument("--world-size", type=int, help="without --state: the run's number of ranks (default 1)")
    p.add_argument("--drop-last", action="store_true", help="without --state: the run dropped each epoch's tail")
    p.add_argument("--shuffle", action="store_true", help="without --state: the run shuffled")
    p.add_argument("--seed", type=int, help="without --state: the run's shuffle seed (default 0)")
    p.add_argument(
        "--shuffle-window-blocks", type=int, help="without --state: the run's shuffle window (default: the loader's)"
    )
    p.add_argument("--step", type=int, required=True, help="the step (0: the run's first batch)")
    p.add_argument("--rank", type=int, help="the rank (default 0)")
    reading = p.add_mutually_exclusive_group()
    reading.add_argument("--records", action="store_true", help="print each record too, read and verified")
    reading.add_argument("--positions", action="store_true", help="read no data: shard and record index only (id -)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar while the approval is verified")
    add_policy_options(p)
    p.set_defaults(
        run=cmd_trace,
        takes=reads(
            Takes("trace", "approval", ("approval-record",)), Takes("trace --state", "state", ("loader-state",))
        ),
    )
