"""Run every benchmark in bench/ in turn: each ``bench/*.py`` with a ``main()`` and a
``__main__`` guard, in name order, in its own process, with the same arguments.

    .venv-bench/bin/python bench/run.py --records 100000   # what `make bench BENCH_ARGS=...` runs
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Helpers with a main of their own that are not benchmarks.
NOT_BENCHMARKS = {"run.py", "corpus.py"}


def benchmarks() -> list[Path]:
    """bench/*.py files that define main() and call it under ``if __name__ == "__main__"``."""
    found = []
    for path in sorted(HERE.glob("*.py")):
        if path.name in NOT_BENCHMARKS or path.name.startswith("_"):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        has_main = any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
        guarded = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
        if has_main and guarded:
            found.append(path)
    return found


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    failed = []
    for path in benchmarks():
        print(f"== {path.name} {' '.join(args)}", flush=True)
        t = time.perf_counter()
        # A fresh process each: one benchmark's imports and memory never colour the next.
        rc = subprocess.call([sys.executable, str(path), *args])
        print(f"== {path.name}: exit {rc}, {time.perf_counter() - t:.0f} s\n", flush=True)
        if rc != 0:
            failed.append(path.name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
