"""Seeded synthetic training records shared by every benchmark.

A record is ``{"id": 16 hex chars, "text": 768-1279 UTF-8 bytes of Zipf-distributed
pseudo-words (~2% non-ASCII words), "tokens": int32 array of 192-320 ids skewed toward
low ids}``, the shape `shared/guides/peers.md` measured the peers with. Records are made
in chunks seeded by (seed, chunk index), so any range is reproducible on its own and a
writer can stream records without the whole corpus in memory.

Raw payload, the unit of every MB/s figure: len(id) + UTF-8 bytes of text + 4 B per token.

    python bench/corpus.py --records 200000      # prints size and a digest of the corpus
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

DEFAULT_RECORDS = 200_000
DEFAULT_SEED = 20261129
CHUNK = 1000
VOCAB_WORDS = 50_000
TOKEN_VOCAB = 50_257

_ASCII = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
_NON_ASCII = "äöüßéèçñøåæœłžšđğışπλжшщюя中文字語"


def _vocabulary(seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Pseudo-words in rank order, each followed by a non-ASCII variant, and the Zipf
    cumulative distributions of word ranks and token ids."""
    rng = np.random.default_rng([seed, 0])
    lengths = rng.integers(2, 11, size=VOCAB_WORDS)
    letters = rng.choice(_ASCII, size=int(lengths.sum()))
    swap_at = rng.integers(0, 1 << 30, size=VOCAB_WORDS)
    swap_with = rng.integers(0, len(_NON_ASCII), size=VOCAB_WORDS)
    words: list[str] = []
    seen: set[str] = set()
    pos = 0
    for i, n in enumerate(lengths):
        word = letters[pos : pos + n].tobytes().decode("ascii")
        pos += n
        if word in seen:
            word = f"{word}{i}"
        seen.add(word)
        j = int(swap_at[i]) % len(word)
        # The variant swaps one letter for a non-ASCII character, so text exercises UTF-8 paths.
        words += [word, word[:j] + _NON_ASCII[int(swap_with[i])] + word[j + 1 :]]
    word_cdf = np.cumsum(1.0 / np.arange(1, VOCAB_WORDS + 1) ** 1.1)
    token_cdf = np.cumsum(1.0 / np.arange(1, TOKEN_VOCAB + 1) ** 1.2)
    return words, word_cdf / word_cdf[-1], token_cdf / token_cdf[-1]


_VOCAB_CACHE: dict[int, tuple[list[str], np.ndarray, np.ndarray]] = {}


def _words(seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    if seed not in _VOCAB_CACHE:
        _VOCAB_CACHE[seed] = _vocabulary(seed)
    return _VOCAB_CACHE[seed]


def _chunk(seed: int, index: int, count: int) -> list[dict[str, Any]]:
    words, word_cdf, token_cdf = _words(seed)
    rng = np.random.default_rng([seed, 1, index])
    ids = rng.integers(0, 2**63, size=count, dtype=np.int64)
    text_len = rng.integers(768, 1280, size=count)
    tok_len = rng.integers(192, 321, size=count)
    # 240 words per record cover 1279 bytes at the mean word length (~6.5 + space);
    # inverse-CDF sampling, because Generator.zipf's rejection loop is slow.
    ranks = np.searchsorted(word_cdf, rng.random((count, 240)))
    # Index 2r is word r, 2r+1 its non-ASCII variant: ~2% of words in running text.
    ranks = (2 * ranks + (rng.random((count, 240)) < 0.02)).tolist()
    tokens = np.searchsorted(token_cdf, rng.random(int(tok_len.sum()))).astype(np.int32)
    out: list[dict[str, Any]] = []
    tpos = 0
    for i in range(count):
        target = int(text_len[i])
        text = " ".join([words[r] for r in ranks[i]])
        raw = text.encode("utf-8")
        while len(raw) < target:  # rare: a run of short words
            raw += b" " + raw
        # Cut at the target byte length, then back off to a character boundary.
        text = raw[:target].decode("utf-8", errors="ignore")
        n = int(tok_len[i])
        out.append({"id": f"{int(ids[i]):016x}", "text": text, "tokens": tokens[tpos : tpos + n].copy()})
        tpos += n
    return out


def iter_records(count: int = DEFAULT_RECORDS, *, seed: int = DEFAULT_SEED, start: int = 0) -> Iterator[dict[str, Any]]:
    """Records ``start .. start+count-1`` of the corpus with `seed`, made chunk by chunk."""
    end = start + count
    index = start // CHUNK
    while index * CHUNK < end:
        first = index * CHUNK
        chunk = _chunk(seed, index, CHUNK)
        lo = max(start, first) - first
        hi = min(end, first + CHUNK) - first
        yield from chunk[lo:hi]
        index += 1


def make_records(count: int = DEFAULT_RECORDS, *, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """The first `count` records, in memory, so that timed runs exclude generation."""
    return list(iter_records(count, seed=seed))


def raw_bytes(record: dict[str, Any]) -> int:
    """Raw payload of one record: id + UTF-8 text + 4 B per token."""
    return len(record["id"]) + len(record["text"].encode("utf-8")) + record["tokens"].nbytes


def corpus_digest(records: list[dict[str, Any]]) -> str:
    """SHA-256 over every field, to check two runs saw the same corpus."""
    h = hashlib.sha256()
    for r in records:
        h.update(r["id"].encode())
        h.update(r["text"].encode("utf-8"))
        h.update(r["tokens"].tobytes())
    return h.hexdigest()


def add_corpus_args(parser: argparse.ArgumentParser) -> None:
    """The corpus flags every benchmark shares."""
    parser.add_argument(
        "--records", type=int, default=DEFAULT_RECORDS, help="records in the corpus (default %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="corpus seed (default %(default)s)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_args(parser)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    records = make_records(args.records, seed=args.seed)
    took = time.perf_counter() - t0
    total = sum(raw_bytes(r) for r in records)
    non_ascii = sum(1 for r in records if not r["text"].isascii())
    print(
        f"{len(records):,} records, raw payload {total / 1e6:.1f} MB ({total / len(records):,.0f} B/record), "
        f"{non_ascii / len(records):.0%} of texts with non-ASCII, made in {took:.1f} s, "
        f"sha256 {corpus_digest(records)[:16]}"
    )


if __name__ == "__main__":
    main()
