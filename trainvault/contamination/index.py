"""The evaluation index: every fingerprinted n-gram of a release as a sorted uint64 array.

Token fingerprints are 64-bit BLAKE2b digests of the normalised token's UTF-8 bytes; an
n-gram's fingerprint is a polynomial over them modulo 2**64 ("blake2b64+poly64"). Python's
salted `hash()` is never used, so fingerprints are the same in every process. A
fingerprint only selects candidates: every candidate is compared token by token with the
n-gram it claims to be, so a collision never becomes a match.

Training tokens that occur in no indexed n-gram map to id 0, and a window holding a 0 is
never looked up; record and field boundaries are 0 as well, so no match crosses them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, Final, Literal

from trainvault.canonical import canonical_json, sha256_hex
from trainvault.contamination.contract import VerifierContract
from trainvault.contamination.normalize import Normalizer
from trainvault.contamination.release import BenchmarkItems, LoadedRelease
from trainvault.extras import require

if TYPE_CHECKING:
    pass

#: Multiplier of the n-gram polynomial (odd, so every power is invertible mod 2**64).
POLY = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1

_FILTER_BITS = 20
_FILTER_SIZE = 1 << _FILTER_BITS
_FILTER_MULT = 0x9E3779B1

UncheckableReason = Literal["too-short", "template-only", "low-information-only"]
UNCHECKABLE_TOO_SHORT: Final = "too-short"
UNCHECKABLE_TEMPLATE_ONLY: Final = "template-only"
#: ngram-exact-v3: every searched gram of the item is low-information, so no match could count.
UNCHECKABLE_LOW_INFORMATION: Final = "low-information-only"


def _numpy() -> Any:
    return require("numpy", "contamination")


def token_fingerprint(token: bytes) -> int:
    """64-bit BLAKE2b of a normalised token (never 0: 0 means "not in the index")."""
    return int.from_bytes(hashlib.blake2b(token, digest_size=8).digest(), "little") or 1


def gram_fingerprint(fingerprints: Sequence[int]) -> int:
    """The polynomial fingerprint of an n-gram from its token fingerprints."""
    h = 0
    for f in fingerprints:
        h = (h * POLY + f) & _MASK
    return h


def _filter_key(length: Any, first: Any, second: Any, last: Any) -> Any:
    """Bucket of a token's (length, first byte, second byte, last byte) in the pre-filter.

    Works on ints and on numpy uint32 arrays alike (multiply-shift hashing mod 2**32).
    """
    if isinstance(length, int):
        key = (min(length, 255) << 24) | (first << 16) | (second << 8) | last
        return ((key * _FILTER_MULT) & 0xFFFFFFFF) >> (32 - _FILTER_BITS)
    np = _numpy()
    key = np.minimum(length, 255).astype(np.uint32) << 24
    key |= first.astype(np.uint32) << 16
    key |= second.astype(np.uint32) << 8
    key |= last
    key *= np.uint32(_FILTER_MULT)
    key >>= 32 - _FILTER_BITS
    return key


def _edge_key(data: bytes, starts: Any, ends: Any) -> Any:
    """Pre-filter bucket of each token ``data[starts[i]:ends[i]]`` from its edge bytes.

    The key is the token's first two and last two bytes, read as little-endian 16-bit
    words where the token begins and two bytes before it ends (a one-byte token's
    neighbours are spaces, so the key depends on the token alone). `data` must begin
    and end with a space.
    """
    np = _numpy()
    from numpy.lib.stride_tricks import as_strided

    words = np.frombuffer(data, dtype="<u2", count=len(data) // 2)
    # Unaligned 16-bit words at every byte offset (the last one reads data[-1] and the
    # byte after it only when len(data) is odd: never, as tokens end before data[-1]).
    w16 = as_strided(words, shape=(len(data) - 1,), strides=(1,), writeable=False)
    key = w16[starts].astype(np.uint32) << 16
    key |= w16[ends - 2]
    key *= np.uint32(_FILTER_MULT)
    key >>= 32 - _FILTER_BITS
    return key


@dataclass(frozen=True)
class IndexedItem:
    """One benchmark item as the index sees it."""

    benchmark: str
    item_id: str
    item_sha256: str
    n_tokens: int
    #: Distinct n-grams searched for (whole-item items: 1); template n-grams excluded.
    total_ngrams: int
    #: Why the item cannot be checked (`too-short`, `template-only`, `low-information-only`), or None.
    uncheckable: UncheckableReason | None
    #: Positions of the grams a match of which counts (ngram-exact-v3: the informative ones;
    #: earlier methods: every searched gram).
    counted_positions: frozenset[int] = frozenset()

    def counted_ngrams(self, matched_positions: Iterable[int]) -> int:
        """How many of `matched_positions` (the item's matched grams) are grams that count."""
        return len(self.counted_positions.intersection(matched_positions))


@dataclass(frozen=True)
class IndexedBenchmark:
    name: str
    split: str
    items: tuple[IndexedItem, ...]
    #: Distinct n-grams left out because more than `max_item_df` items share them.
    n_hot_ngrams_excluded: int


class EvalIndex:
    """Fingerprints of every searched n-gram of a release, under one contract.

    `postings[g]` lists ``(benchmark index, item index, position of g in the item)`` for
    gram `g`; the position is the gram's first occurrence, so it names the gram within
    its item independently of how the index was built.
    """

    def __init__(self, contract: VerifierContract, release: LoadedRelease, *, contract_sha256: str):
        self.contract = contract
        self.contract_sha256 = contract_sha256
        self.release = release
        self.release_sha256 = release.sha256
        self.release_id = release.release.id
        self.normalizer = Normalizer(contract.method.normalization)
        self._build_postings(release)
        fps = self._build_vocab()
        self._build_tables(fps)

    def _build_postings(self, release: LoadedRelease) -> None:
        """`benchmarks`, `grams` (in first-seen order) and `postings` of every searched gram."""
        grams: dict[tuple[bytes, ...], int] = {}
        postings: list[list[tuple[int, int, int]]] = []
        benchmarks = []
        for b_idx, bench in enumerate(release.benchmarks):
            infos, item_grams, hot = self._item_grams(bench)
            for i_idx, kept in enumerate(item_grams):
                for g, pos in kept.items():
                    gid = grams.setdefault(g, len(grams))
                    if gid == len(postings):
                        postings.append([])
                    postings[gid].append((b_idx, i_idx, pos))
            benchmarks.append(IndexedBenchmark(bench.name, bench.split, tuple(infos), hot))
        self.benchmarks: tuple[IndexedBenchmark, ...] = tuple(benchmarks)
        self.grams: list[tuple[bytes, ...]] = list(grams)
        self.postings = postings

    def _build_vocab(self) -> list[int]:
        """`vocab`, `token_fps` and the two pre-filters; returns the token fingerprints by id."""
        np = _numpy()
        # Vocabulary: every token of a searched gram gets a small id; its fingerprint is a
        # table entry, so training text needs one dict lookup per token and no hashing.
        self.vocab: dict[bytes, int] = {}
        for g in self.grams:
            for t in g:
                self.vocab.setdefault(t, len(self.vocab) + 1)
        fps = [0] * (len(self.vocab) + 1)
        for t, i in self.vocab.items():
            fps[i] = token_fingerprint(t)
        self.token_fps = np.array(fps, dtype=np.uint64)
        # Pre-filter over (length, first two bytes, last byte) of each vocabulary token: most
        # training tokens fail it in one vectorised gather, and only those that pass are
        # looked up in `vocab` (a passing token that is not in the vocabulary gets id 0).
        self._filter = np.zeros(_FILTER_SIZE, dtype=np.bool_)
        for t in self.vocab:
            padded = t + b" "
            self._filter[_filter_key(len(t), padded[0], padded[1], t[-1])] = True

        # A second, cheaper pre-filter for `find_stream`: over each token's first two and
        # last two bytes (the byte after and before a token is always a space).
        self._filter2 = np.zeros(_FILTER_SIZE, dtype=np.bool_)
        if self.vocab:
            vocab_tokens = list(self.vocab)
            data = b" " + b" ".join(vocab_tokens) + b" "
            lengths = np.fromiter(map(len, vocab_tokens), dtype=np.int64, count=len(vocab_tokens))
            v_starts = 1 + np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
            self._filter2[_edge_key(data, v_starts, v_starts + lengths)] = True
        return fps

    def _build_tables(self, fps: list[int]) -> None:
        """Per gram length, the sorted gram fingerprints that `find` searches."""
        np = _numpy()
        by_len: dict[int, list[int]] = {}
        for gid, g in enumerate(self.grams):
            by_len.setdefault(len(g), []).append(gid)
        #: Per gram length: (sorted distinct fingerprints, start offsets, gram ids by fingerprint).
        self.tables: dict[int, tuple[Any, Any, Any]] = {}
        for k, gids in sorted(by_len.items()):
            h = np.array([gram_fingerprint([fps[self.vocab[t]] for t in self.grams[g]]) for g in gids], dtype=np.uint64)
            order = np.argsort(h, kind="stable")
            h_sorted = h[order]
            keys, starts = np.unique(h_sorted, return_index=True)
            starts = np.append(starts, len(h_sorted)).astype(np.int64)
            self.tables[k] = (keys, starts, np.array(gids, dtype=np.int64)[order])
        self._poly = np.uint64(POLY)
        self._min_len = min(self.tables, default=0)

    def _item_grams(self, bench: BenchmarkItems) -> tuple[list[IndexedItem], list[dict[tuple[bytes, ...], int]], int]:
        method = self.contract.method
        n, min_tokens = method.n, method.min_item_tokens
        per_item: list[dict[tuple[bytes, ...], int]] = []
        lengths: list[int] = []
        df: dict[tuple[bytes, ...], int] = {}
        for item in bench.items:
            toks: list[bytes] = []
            for f in bench.text_fields:
                # Fields are tokenised one by one: joining them is like a space between.
                toks.extend(self.normalizer.tokens(item[f]))
            grams: dict[tuple[bytes, ...], int] = {}
            if len(toks) < min_tokens:
                pass
            elif len(toks) < n:
                grams[tuple(toks)] = 0
            else:
                for p in range(len(toks) - n + 1):
                    grams.setdefault(tuple(toks[p : p + n]), p)
            for g in grams:
                df[g] = df.get(g, 0) + 1
            per_item.append(grams)
            lengths.append(len(toks))
        hot = {g for g, c in df.items() if c > method.max_item_df}
        infos = []
        kept_all = []
        evidence = method.evidence
        for item, grams, length in zip(bench.items, per_item, lengths, strict=False):
            kept = {g: p for g, p in grams.items() if g not in hot}
            counted = frozenset(p for g, p in kept.items() if evidence is None or not evidence.is_low_information(g))
            reason: UncheckableReason | None = None
            if length < min_tokens:
                reason = UNCHECKABLE_TOO_SHORT
            elif not kept:
                reason = UNCHECKABLE_TEMPLATE_ONLY
            elif not counted:
                reason = UNCHECKABLE_LOW_INFORMATION
            infos.append(
                IndexedItem(
                    benchmark=bench.name,
                    item_id=item[bench.id_field],
                    item_sha256=sha256_hex(canonical_json(item)),
                    n_tokens=length,
                    total_ngrams=len(kept),
                    uncheckable=reason,
                    counted_positions=counted,
                )
            )
            kept_all.append(kept)
        return infos, kept_all, len(hot)

    @property
    def lengths(self) -> list[int]:
        """The gram lengths searched for (n, plus the lengths of whole-item items)."""
        return list(self.tables)

    def token_ids(self, tokens: list[bytes]) -> Any:
        """Vocabulary ids of `tokens` as an int32 array (0: in no searched gram)."""
        np = _numpy()
        return np.fromiter(map(self.vocab.get, tokens, repeat(0)), dtype=np.int32, count=len(tokens))

    def stream_ids(self, data: bytes, starts: Any, ends: Any) -> Any:
        """Vocabulary ids (int32, 0: in no searched gram) of the tokens ``data[starts[i]:ends[i]]``.

        `data` must end with a space, so a token's second byte always exists.
        """
        np = _numpy()
        arr = np.frombuffer(data, dtype=np.uint8)
        lengths = ends - starts
        keys = _filter_key(lengths, arr[starts], arr[starts + 1], arr[ends - 1])
        cand = np.flatnonzero(self._filter[keys])
        ids = np.zeros(len(starts), dtype=np.int32)
        if len(cand):
            get = self.vocab.get
            ids[cand] = [get(data[a:b], 0) for a, b in zip(starts[cand].tolist(), ends[cand].tolist(), strict=False)]
        return ids

    def find_stream(self, data: bytes, starts: Any, ends: Any) -> list[tuple[int, int]]:
        """Verified matches ``(token position, gram id)`` among the tokens ``data[starts[i]:ends[i]]``.

        Equal to ``find(tokens, stream_ids(data, starts, ends))``, faster: a window can
        match only if every one of its tokens passes the pre-filter, so only runs of at
        least `min(lengths)` consecutive passing tokens are looked up and searched, and
        such runs are found by testing every `min(lengths)`-th token first.
        `data` must begin and end with a space (a `TokenBatch`).
        """
        np = _numpy()
        found = self._passing_stretches(data, starts, ends)
        if found is None:
            return []
        cand, _ = found
        # The maximal runs of consecutive positions in `cand` that hold such a stretch,
        # back to back, each followed by a separator (position -1, id 0: no window spans two).
        cut = np.flatnonzero(cand[1:] - cand[:-1] != 1) + 1
        lo = np.concatenate(([0], cut))
        hi = np.concatenate((cut, [len(cand)]))
        keep = hi - lo >= self._min_len
        first, size = cand[lo[keep]], (hi - lo)[keep] + 1
        offset = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
        pos = np.repeat(first, size) + offset
        sep = offset == np.repeat(size - 1, size)
        pos[sep] = -1
        a = starts[pos]
        b = ends[pos]
        a[sep] = 0
        b[sep] = 0  # data[0:0] == b"", which is in no gram
        picked = list(map(data.__getitem__, map(slice, a.tolist(), b.tolist())))
        ids = np.fromiter(map(self.vocab.get, picked, repeat(0)), dtype=np.int32, count=len(picked))
        positions = pos.tolist()
        matches = self.find(picked, ids)
        return [(positions[c], g) for c, g in matches]

    def _passing_stretches(self, data: bytes, starts: Any, ends: Any) -> tuple[Any, Any] | None:
        """The vectorised pre-filter of `find_stream`: ``(cand, brk)``, or None when nothing can match.

        `cand` are the positions of tokens that pass the pre-filter near a tested one, and
        `brk` the indices i in `cand` where ``cand[i .. i+k_min-1]`` are consecutive positions.
        """
        np = _numpy()
        k_min = self._min_len
        n = len(starts)
        if not k_min or n < k_min:
            return None
        # Every run of k_min consecutive tokens holds one position divisible by k_min:
        # test only those, then every token within k_min - 1 of one that passed.
        passed = np.flatnonzero(self._filter2[_edge_key(data, starts[::k_min], ends[::k_min])])
        if not len(passed):
            return None
        near = ((passed * k_min)[:, None] + np.arange(1 - k_min, k_min)).ravel()
        mask = np.zeros(n + k_min, dtype=np.bool_)
        mask[near[near >= 0]] = True
        near = np.flatnonzero(mask[:n])
        cand = near[self._filter2[_edge_key(data, starts[near], ends[near])]]
        if len(cand) < k_min:
            return None
        brk = np.flatnonzero(cand[k_min - 1 :] - cand[: len(cand) - k_min + 1] == k_min - 1)
        if not len(brk):
            return None
        return cand, brk

    def find(self, tokens: Any, ids: Any) -> list[tuple[int, int]]:
        """Verified matches ``(start position, gram id)`` in a token stream.

        `ids` are the tokens' vocabulary ids; `tokens[i]` gives token i's bytes (a list,
        or any object with integer indexing). Texts are separated by a token of id 0,
        so no window spans two texts. Every candidate is checked token by token.
        """
        np = _numpy()
        if not len(ids):
            return []
        zero = np.concatenate(([0], np.cumsum(ids == 0, dtype=np.int64)))
        found: list[tuple[int, int]] = []
        for k, (keys, starts, gids) in self.tables.items():
            if len(ids) < k:
                continue
            # A window [i, i+k) is searchable when it holds no 0 id.
            cand = np.flatnonzero(zero[k:] == zero[:-k])
            if not len(cand):
                continue
            fps = self.token_fps
            h = fps[ids[cand]]
            for j in range(1, k):
                h = h * self._poly + fps[ids[cand + j]]
            pos = np.searchsorted(keys, h)
            pos[pos == len(keys)] = 0
            hit = np.flatnonzero(keys[pos] == h)
            as_list = isinstance(tokens, list)
            for c, p in zip(cand[hit].tolist(), pos[hit].tolist(), strict=False):
                window = tuple(tokens[c : c + k]) if as_list else tuple(tokens[c + j] for j in range(k))
                for g in gids[starts[p] : starts[p + 1]].tolist():
                    if self.grams[g] == window:
                        found.append((c, g))
        return found
