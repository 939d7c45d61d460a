"""`make demo`: save a small curriculum dataset into a local folder and summarise its manifest."""

from __future__ import annotations

import os
import sys

from pipelines.examples.curriculum import STAGES, generate_records
from trainvault import TrainVault, iter_shard


def main(root: str = ".demo/curriculum") -> None:
    vault = TrainVault()
    manifest_uri = os.path.abspath(os.path.join(root, "data-manifest-v1.json"))
    saver = vault.dataset_saver(manifest_uri)
    jobs = [("train", stage, str(i)) for stage in STAGES for i in range(4)]
    jobs += [("valid", None, "0"), ("test", None, "0")]
    for n, (split, stage, shard_id) in enumerate(jobs, 1):
        metadata = {"name": stage, **STAGES[stage]} if stage else None
        entry = saver.save(split, stage, generate_records(split, stage, shard_id), curriculum_metadata=metadata, shard_id=shard_id)
        print(f"[{n:2d}/{len(jobs)}] {split}/{entry.key}: {entry.record_count} records, {entry.size_bytes} bytes", file=sys.stderr)
    manifest = saver.commit_manifest()

    summary = manifest.summary()
    print(f"\nmanifest   {manifest_uri}")
    print(f"sha256     {summary['sha256']}")
    print(f"format     {summary['data_format']}\n")
    print(f"{'split':<7} {'stage':<8} {'shards':>6} {'records':>8} {'bytes':>9}")
    for split, info in summary["splits"].items():
        for stage, st in info["stages"].items():
            print(f"{split:<7} {stage:<8} {st['shards']:>6} {st['records']:>8} {st['bytes']:>9}")
        if info["curricula"]:
            print(f"{'':<7} curricula: " + ", ".join(f"{k} ({v} shards)" for k, v in info["curricula"].items()))
    first = manifest.splits["train"].shards[0]
    record = next(iter_shard(manifest.data_format, first))
    print(f"\nfirst record of {first.key}: {record['text']!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
