"""``trainvault trace``: the records behind one training step, from an approval or a saved loader state."""

from __future__ import annotations

import argparse
import json
from typing import Any

from trainvault.cli.approval import add_policy_options, policy_from_args
from trainvault.cli.console import vault_from_env, waiting
from trainvault.errors import TrainVaultError


def _read_json(path: str, what: str) -> dict[str, Any]:
    from trainvault.errors import ConfigurationError

    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested past the parser's depth
        raise ConfigurationError(f"{path} is not JSON ({type(exc).__name__}: {exc}); it should hold {what}") from None
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
        if args.exclude is not None:
            raise TrainVaultError("--exclude is for --state without an APPROVAL: an approval binds its own exclusions")
        with waiting(f"verifying {args.approval}: hashing every file it binds"):
            approved = open_approved(vault_from_env(), args.approval, args.sha256, trusted_keys=args.key,
                                     threshold=args.threshold, policy=policy_from_args(args))
        return approved.split_data_loader(dataloader_args=batch).load(split, curriculum_stages=stages)
    from trainvault.errors import ResumeStateError
    from trainvault.loading import SplitDataLoader

    if state is None:
        raise TrainVaultError("trace needs an APPROVAL or --state STATE.json")
    if state.manifest_uri is None:
        raise ResumeStateError(f"{args.state} names no manifest (a version 1 state): give the APPROVAL too")
    exclude = None if args.exclude is None else _read_json(args.exclude, "the loader's exclude mapping")
    return SplitDataLoader(
        vault_from_env().storage, state.manifest_uri, shuffle=ident.shuffle, seed=ident.seed,
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
    p.add_argument("--key", "--keys", dest="key", action="append", help="trusted public key file (repeatable)")
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
    reads = p.add_mutually_exclusive_group()
    reads.add_argument("--records", action="store_true", help="print each record too, read and verified")
    reads.add_argument("--positions", action="store_true", help="read no data: shard and record index only (id -)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_policy_options(p)
    p.set_defaults(run=cmd_trace)
