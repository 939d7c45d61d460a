"""A batch of tokenised texts, as offsets into one byte string (`Normalizer.tokenize_batch`)."""

from __future__ import annotations

from itertools import chain
from typing import Any


class TokenBatch:
    """The tokens of a batch of texts: token i is ``data[starts[i]:ends[i]]``.

    Texts are separated by one marker token ``A`` (never a real token). `data` ends with
    a space, so every token is followed by at least one byte.
    """

    __slots__ = ("data", "ends", "n_texts", "starts")

    def __init__(self, data: bytes, starts: Any, ends: Any, n_texts: int):
        self.data, self.starts, self.ends, self.n_texts = data, starts, ends, n_texts

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> bytes:
        return self.data[int(self.starts[i]) : int(self.ends[i])]

    def text_starts(self) -> list[int]:
        """Index of each text's first token."""
        from trainvault.extras import require

        np = require("numpy", "contamination")
        arr = np.frombuffer(self.data, dtype=np.uint8)
        marker = np.flatnonzero((self.ends - self.starts == 1) & (arr[self.starts] == 0x41))
        return [0, *(marker + 1).tolist()]

    def split(self) -> list[list[bytes]]:
        """Tokens per text (for tests and debugging)."""
        bounds = [*self.text_starts(), len(self) + 1]
        return [[self[i] for i in range(bounds[t], bounds[t + 1] - 1)] for t in range(self.n_texts)]


def splice(
    np: Any, mapped: bytes, starts: Any, ends: Any, tok: Any, norms: list[tuple[bytes, ...]], n_texts: int
) -> TokenBatch:
    """The batch with each token `tok[i]` replaced by its normalised tokens `norms[i]` (0, 1 or
    more), which live in an auxiliary area appended after the batch bytes."""
    counts: list[int] = list(map(len, norms))
    aux: list[bytes] = list(chain.from_iterable(norms))
    if not aux:
        keep = np.ones(len(starts), dtype=np.bool_)
        keep[tok] = False
        return TokenBatch(mapped, starts[keep], ends[keep], n_texts)
    lengths = np.fromiter(map(len, aux), dtype=np.int64, count=len(aux))
    aux_starts = len(mapped) + np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    mapped = b"".join((mapped, b" ".join(aux), b" "))  # one copy of the batch, not two
    if counts.count(1) == len(counts):
        # Common case: each such word is one token; replace its bytes in place.
        # starts/ends are views of the caller's fresh bounds array: write in place.
        starts[tok] = aux_starts
        ends[tok] = aux_starts + lengths
        return TokenBatch(mapped, starts, ends, n_texts)
    per_token = np.ones(len(starts), dtype=np.int64)
    per_token[tok] = counts
    slot_of = np.cumsum(per_token) - per_token  # new index of each old token's first slot
    total = int(slot_of[-1] + per_token[-1])
    keep = np.ones(len(starts), dtype=np.bool_)
    keep[tok] = False
    new_starts = np.empty(total, dtype=np.int64)
    new_ends = np.empty(total, dtype=np.int64)
    new_starts[slot_of[keep]] = starts[keep]
    new_ends[slot_of[keep]] = ends[keep]
    counts_arr = np.asarray(counts, dtype=np.int64)
    within = np.arange(len(aux)) - np.repeat(np.cumsum(counts_arr) - counts_arr, counts_arr)
    slots = np.repeat(slot_of[tok], counts_arr) + within
    new_starts[slots] = aux_starts
    new_ends[slots] = aux_starts + lengths
    return TokenBatch(mapped, new_starts, new_ends, n_texts)
