"""Representation loader benchmark: trainvault's verifying loader against the raw read limit.

One local publication (default 2 sources x 512 blocks x 1,024 tokens, projection dim 256,
bf16 rows, one layer and state kind, parts of 262,144 rows: 128 MiB states artifacts),
read whole by:

- trainvault `iter_representation_examples` (pinned manifest, etag-bound indexes,
  artifact manifest, every artifact hashed and its header checked, rows copied out);
- the raw limit over the same artifacts: read the file, `hashlib.sha256`,
  `safetensors.torch.load`, copy each block's rows (no custody checks at all).

Each measurement runs in a fresh process: examples/s, MB/s (artifact bytes read per
second), examples per CPU-second (steadier than wall time on a shared machine), and peak
RSS over the process's RSS before the first read (VmHWM - VmRSS).
Throughput is the median of `--repeats` runs, taken round-robin. Goals: loader >= 80% of
raw; loader peak <= largest artifact + one part's rows + 64 MiB.

    .venv/bin/python bench/representations.py
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent / ".data" / "representations"
LAYER, KIND = 31, "post_mlp"
MIB = 1 << 20


def _status(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB -> MiB
    raise RuntimeError(f"{field} not in /proc/self/status")


def publication(args: argparse.Namespace) -> tuple[str, str, Path]:
    """Write the publication once per shape; return (manifest uri, sha256, root)."""
    import torch

    from trainvault import TrainVault

    root = DATA / f"s{args.sources}-b{args.blocks}-t{args.tokens}-d{args.dim}-p{args.part_rows}"
    manifest = root / "representation-manifest-v1.json"
    if not manifest.exists():
        t = time.perf_counter()
        vault = TrainVault()
        w = vault.representation_writer(
            str(root),
            teacher={"name": "bench-teacher", "revision": "r0", "num_layers": 32, "hidden_size": 4096},
            projection={"method": "gaussian", "dim": args.dim, "seed": 0},
            layers=[LAYER],
            state_kinds=[KIND],
            part_rows=args.part_rows,
        )
        g = torch.Generator().manual_seed(0)
        for s in range(args.sources):
            for b in range(args.blocks):
                ids = torch.randint(0, 100_000, (args.tokens,), generator=g, dtype=torch.int32)
                rows = torch.randn(args.tokens, args.dim, generator=g).to(torch.bfloat16)
                w.add_block("analysis", f"source{s}", b, ids, {(LAYER, KIND): rows})
        w.commit()
        print(f"wrote {root} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    data = manifest.read_bytes()
    return manifest.as_uri(), hashlib.sha256(data).hexdigest(), root


def selected_artifacts(root: Path) -> list[dict]:
    """The artifacts the loader reads for this selection, in its order (tokens, then states, per part)."""
    entries = json.loads((root / "representation-artifacts-v1.json").read_bytes())["artifacts"]
    by_part: dict[tuple[str, str], list[dict]] = {}
    for e in entries:
        if e["kind"] == "tokens" or (e["layer"], e["state_kind"]) == (LAYER, KIND):
            by_part.setdefault((e["source"], e["part"]), []).append(e)
    return [e for key in sorted(by_part) for e in sorted(by_part[key], key=lambda e: e["kind"] != "tokens")]


def child(mode: str, args: argparse.Namespace) -> None:
    import safetensors.torch  # noqa: F401 - imported before the baseline, in both modes

    from trainvault import TrainVault

    uri, sha, root = publication(args)
    artifacts = selected_artifacts(root)
    nbytes = sum(e["size_bytes"] for e in artifacts)
    sources = [f"source{s}" for s in range(args.sources)]
    base = _status("VmRSS")
    t, cpu = time.perf_counter(), time.process_time()
    n = 0
    if mode == "loader":
        vault = TrainVault()
        for example in vault.iter_representation_examples(
            uri,
            sha,
            split="analysis",
            sources=sources,
            per_source_count=args.blocks,
            teacher_layer=LAYER,
            state_kind=KIND,
        ):
            n += 1
            del example
    else:
        from safetensors.torch import load

        for tokens_entry, states_entry in zip(artifacts[::2], artifacts[1::2], strict=False):
            out = []
            for entry in (tokens_entry, states_entry):
                data = (root / entry["uri"]).read_bytes()
                if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                    raise SystemExit(f"{entry['uri']}: digest mismatch")
                tensors = load(data)
                del data
                name = "input_ids" if entry["kind"] == "tokens" else "rows"
                offsets = tensors["row_offsets"].tolist()
                out.append([tensors[name][a:b].clone() for a, b in itertools.pairwise(offsets)])
                del tensors
            n += len(out[1])
            del out
    took, cpu = time.perf_counter() - t, time.process_time() - cpu
    print(
        json.dumps(
            {
                "examples": n,
                "bytes": nbytes,
                "seconds": took,
                "cpu": cpu,
                "peak": _status("VmHWM") - base,
                "largest": max(e["size_bytes"] for e in artifacts) / MIB,
            }
        )
    )


def run_child(mode: str, argv: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", mode, *argv], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{mode} child failed: {done.stderr.strip()[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sources", type=int, default=2)
    p.add_argument("--blocks", type=int, default=512, help="blocks per source")
    p.add_argument("--tokens", type=int, default=1024, help="tokens per block")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--part-rows", type=int, default=262_144)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", choices=["loader", "raw"], help=argparse.SUPPRESS)
    # bench/run.py passes every benchmark the same arguments; ignore the ones meant for others.
    args, _ = p.parse_known_args(argv)
    if args.child:
        return child(args.child, args)
    shape = [
        "--sources",
        str(args.sources),
        "--blocks",
        str(args.blocks),
        "--tokens",
        str(args.tokens),
        "--dim",
        str(args.dim),
        "--part-rows",
        str(args.part_rows),
    ]
    uri, _, _ = publication(args)
    runs: dict[str, list[dict]] = {"raw": [], "loader": []}
    run_child("raw", shape)  # warm the page cache; not counted
    for _ in range(args.repeats):
        for mode in runs:
            runs[mode].append(run_child(mode, shape))
    examples = args.sources * args.blocks
    rows_mib = args.part_rows * (args.dim * 2 + 4) / MIB  # one part's states + tokens rows, copied out
    print(
        f"\n{examples} examples ({args.sources} sources x {args.blocks} blocks x {args.tokens} tokens, dim {args.dim}, "
        f"bf16) from {uri}; median of {args.repeats}\n"
    )
    print("| reader | examples/s | MB/s | vs raw | examples per CPU-s | vs raw | peak RSS over start (MiB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    rate = {m: statistics.median(r["examples"] / r["seconds"] for r in rs) for m, rs in runs.items()}
    per_cpu = {m: statistics.median(r["examples"] / r["cpu"] for r in rs) for m, rs in runs.items()}
    for mode, label in (
        ("raw", "raw limit (read + sha256 + safetensors.torch.load + copy)"),
        ("loader", "trainvault iter_representation_examples"),
    ):
        rs = runs[mode]
        assert all(r["examples"] == examples for r in rs), rs
        mbps = statistics.median(r["bytes"] / r["seconds"] / 1e6 for r in rs)
        print(
            f"| {label} | {rate[mode]:,.0f} | {mbps:,.0f} | {rate[mode] / rate['raw']:.0%} | {per_cpu[mode]:,.0f} | "
            f"{per_cpu[mode] / per_cpu['raw']:.0%} | {max(r['peak'] for r in rs):,.0f} |"
        )
    largest = runs["loader"][0]["largest"]
    budget = largest + rows_mib + 64
    peak = max(r["peak"] for r in runs["loader"])
    print(
        f"\nloader / raw throughput: {rate['loader'] / rate['raw']:.2f} wall, {per_cpu['loader'] / per_cpu['raw']:.2f} "
        "per CPU-second (goal >= 0.80)"
    )
    print(
        f"loader peak {peak:,.0f} MiB vs budget {budget:,.0f} MiB (largest artifact {largest:,.0f} + rows {rows_mib:,.0f} "
        f"+ 64): ratio {peak / budget:.2f} (goal <= 1.00); raw peak / loader peak: "
        f"{max(r['peak'] for r in runs['raw']) / peak:.2f}"
    )


if __name__ == "__main__":
    main()
