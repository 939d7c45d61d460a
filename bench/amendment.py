"""Amendment benchmark: writing and opening a takedown amendment of 1,000 records over a large
approval, against opening the same approval without it, in the same run.

For each `--shards` count, a cloned publication of that many shards of `--small-records` records
(bench/approved_open.py's builder: one saved shard, every other a hard link to it) and its
signed approval. Then, in one process:

- write: `TrainVault.amend` of `--removals` records spread over the shards (by shard key and
  record index): bytes written (the amendment envelope), read requests and bytes (the
  approval's open before it is not counted), seconds; and that no shard byte changed (the
  shard inode's sha256 and every shard's listed size, before and after);
- open: a fresh `open_approved` with ``amendments=`` against one without (bytes read, requests,
  seconds; median of `--repeats`), and the ratio;
- first batch: seconds from the start of the open to ``next(iter(loader))`` (batch 32, no
  workers), amended against plain, and the ratio (the first batch of a new epoch);
- resume: the same from a state saved one batch into the epoch before the amendment: the plain
  open resumes it as it is, the amended one re-deals the rest of the epoch without the removed
  records (`trainvault.approval.resume`), and the ratio.

    .venv/bin/python bench/amendment.py --shards 1000,10000,100000
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from approved_open import Keys, Size, counted, policy_for, publish, settle

from trainvault import StorageConfig, TrainVault
from trainvault.approval import SigningKey

DATA = Path(__file__).resolve().parent / ".data" / "amendment"


def shard_state(vault: TrainVault, manifest: Any) -> tuple[str, list[tuple[str, int]]]:
    """The first shard's sha256 (every other shard is a link to it) and every shard's listed size."""
    first = manifest.splits["train"].shards[0].uri
    digest = hashlib.sha256(vault.storage.get(first)).hexdigest()
    folder = first.rsplit("/", 1)[0] + "/"
    return digest, [(o.uri, o.size) for o in vault.storage.list(folder)]


def open_and_first_batch(
    cfg: StorageConfig, a: Any, keys: Keys, amendments: str | None, state: Any = None
) -> tuple[Any, float, float]:
    vault = TrainVault(storage=cfg)
    start = time.perf_counter()
    with counted() as c:
        approved = vault.open_approved(
            a.uri,
            a.sha256,
            trusted_keys=[keys.approver.public_key],
            policy=replace(policy_for(keys.scanner.public_key), max_removed_fraction=(1, 10)),
            amendments=amendments,
        )
    loader = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 32}).load("train")
    if state is not None:
        loader.load_state_dict(state)
    batches = iter(loader)
    next(batches)
    first = time.perf_counter() - start
    getattr(batches, "close", lambda: None)()
    settle()
    return c[0], c[1], first


def row(shards: int, records: int, removals: int, repeats: int, keys: Keys) -> None:
    cfg = StorageConfig()
    a, built = publish("local", Size(f"{shards}shards", shards, records), cfg, None, keys, DATA)
    vault = TrainVault(storage=cfg)
    approved = vault.open_approved(
        a.uri, a.sha256, trusted_keys=[keys.approver.public_key], policy=policy_for(keys.scanner.public_key)
    )
    manifest = approved.manifest
    before = shard_state(vault, manifest)
    run = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 32}).load("train")
    next(iter(run))
    saved = run.state_dict()  # a run one batch in, before the amendment
    step = max(1, shards // removals)
    chosen = [(f"_/{(i * step) % shards}", (i * step // shards + i) % records) for i in range(removals)]
    take = [{"split": "train", "shard": k, "record_index": r, "reason": "opt-out"} for k, r in dict.fromkeys(chosen)]
    with counted() as w:
        written = vault.amend(approved, take, signing_keys=keys.approver)
    if shard_state(vault, manifest) != before:
        raise SystemExit("a shard byte changed: an amendment must write no shard")
    prefix = a.uri.rsplit("/", 1)[0] + "/amendments"
    plain = [open_and_first_batch(cfg, a, keys, None) for _ in range(repeats)]
    amended = [open_and_first_batch(cfg, a, keys, prefix) for _ in range(repeats)]
    p_s, a_s = (statistics.median(r[1] for r in runs) for runs in (plain, amended))
    p_1, a_1 = (statistics.median(r[2] for r in runs) for runs in (plain, amended))
    p_r, a_r = plain[0][0], amended[0][0]
    p_2, a_2 = (
        statistics.median(open_and_first_batch(cfg, a, keys, source, saved)[2] for _ in range(repeats))
        for source in (None, prefix)
    )
    print(
        f"{shards:>7} {len(take):>6} | {written.ref.size:>9,} {w[0].requests:>4} {w[1]:>6.2f} | "
        f"{p_r.bytes:>11,} {p_r.requests:>4} {p_s:>6.2f} | {a_r.bytes:>11,} {a_r.requests:>4} {a_s:>6.2f} "
        f"{a_s / p_s:>5.2f}x | {p_1:>6.2f} {a_1:>6.2f} {a_1 / p_1:>5.2f}x | {p_2:>6.2f} {a_2:>6.2f} "
        f"{a_2 / p_2:>5.2f}x | {built:>6.1f}",
        flush=True,
    )


HEADER = (
    f"{'shards':>7} {'remove':>6} | {'written B':>9} {'req':>4} {'s':>6} | {'plain open B':>11} {'req':>4} "
    f"{'s':>6} | {'amended B':>11} {'req':>4} {'s':>6} {'ratio':>6} | {'1st b':>6} {'amend':>6} {'ratio':>6} | "
    f"{'resume':>6} {'amend':>6} {'ratio':>6} | {'built s':>6}"
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", default="1000,10000,100000", help="rows (default %(default)s)")
    parser.add_argument("--small-records", type=int, default=10, help="records per shard (default 10)")
    parser.add_argument("--removals", type=int, default=1000, help="records the amendment removes (default 1000)")
    parser.add_argument("--repeats", type=int, default=3, help="opens per side, median (default 3)")
    args, _ = parser.parse_known_args(argv)  # bench/run.py passes every benchmark the same arguments
    import torch  # noqa: F401  (what a trainer has imported before it opens)

    keys = Keys(SigningKey.generate(), SigningKey.generate())
    print("written: the amendment envelope's bytes, the amend call's read requests and seconds; no shard byte written")
    print(HEADER, flush=True)
    for n in (int(s) for s in args.shards.split(",") if s.strip()):
        row(n, args.small_records, args.removals, args.repeats, keys)


if __name__ == "__main__":
    main()
