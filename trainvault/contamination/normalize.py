"""tvnorm-v1: the text normalisation both sides of a contamination scan share.

A token is a maximal run of characters that are neither whitespace (`str.isspace`) nor
in a Unicode category ``P*`` or ``S*``, taken after NFKC and ``casefold()``. Digits and
diacritics are kept unless the spec switches on ``map_digits`` (every decimal digit
becomes ``0``) or ``strip_diacritics`` (NFD, drop ``Mn``, NFKC again).

Tokens are returned as UTF-8 `bytes`: the hot path works on bytes, and the n-gram
fingerprints hash bytes, so no side ever decodes them back.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

NORMALIZATION_ID = "tvnorm-v1"

# Whitespace that `bytes.split()` does not split on but `str.isspace` does: the ASCII
# information separators. The byte table turns them into spaces so both agree.
_ASCII_SEPARATORS = bytes(b for b in range(128) if chr(b).isspace() or unicodedata.category(chr(b))[0] in "PS")


class NormalizationSpec(BaseModel):
    """The recorded parameters of tvnorm-v1 (they go into the contract and the report)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: Literal["tvnorm-v1"] = NORMALIZATION_ID
    nfkc: Literal[True] = True
    casefold: Literal[True] = True
    strip_categories: list[Literal["P", "S"]] = Field(default_factory=lambda: ["P", "S"])
    map_digits: bool = False
    strip_diacritics: bool = False

    @field_validator("strip_categories")
    @classmethod
    def _categories(cls, value: list[str]) -> list[str]:
        if value != ["P", "S"]:
            raise ValueError('tvnorm-v1 strips exactly the categories ["P", "S"]')
        return value


@lru_cache(maxsize=None)
def _non_ascii_class(map_digits: bool) -> tuple[re.Pattern[str], re.Pattern[str] | None]:
    """Regexes over the non-ASCII separators (and digits), built once per process.

    A character class compiles to bitmaps, so one scan finds every non-ASCII separator at
    C speed; most text then skips the substitution entirely.
    """
    seps: list[int] = []
    digits: list[int] = []
    for cp in range(128, sys.maxunicode + 1):
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat[0] in "PS" or ch.isspace():
            seps.append(cp)
        elif map_digits and cat == "Nd":
            digits.append(cp)
    sep_re = re.compile("[" + _ranges(seps) + "]+")
    digit_re = re.compile("[" + _ranges(digits) + "]") if digits else None
    return sep_re, digit_re


def _ranges(cps: list[int]) -> str:
    """A regex class body for sorted code points, as compact ranges."""
    out: list[str] = []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        a, b = re.escape(chr(cps[i])), re.escape(chr(cps[j]))
        out.append(a if i == j else f"{a}-{b}")
        i = j + 1
    return "".join(out)


class Normalizer:
    """Tokenises text under one `NormalizationSpec`. Build once; `tokens` is the hot path."""

    def __init__(self, spec: NormalizationSpec | None = None):
        self.spec = spec or NormalizationSpec()
        table = bytearray(range(256))
        for b in _ASCII_SEPARATORS:
            table[b] = 0x20
        for b in range(ord("A"), ord("Z") + 1):
            table[b] = b + 32  # ASCII casefold is lower-casing
        if self.spec.map_digits:
            for b in range(ord("0"), ord("9") + 1):
                table[b] = ord("0")
        self._table = bytes(table)
        # The same, with every non-ASCII byte as 0x80: `find` (memchr) then locates the
        # words that need Unicode treatment; their bytes are taken from the original.
        self._mark_table = bytes(table[:128]) + b"\x80" * 128
        self._word_cache: dict[bytes, bytes] = {}
        self._sep_re: re.Pattern[str] | None = None
        self._digit_re: re.Pattern[str] | None = None

    def _unicode_res(self) -> tuple[re.Pattern[str], re.Pattern[str] | None]:
        if self._sep_re is None:
            self._sep_re, self._digit_re = _non_ascii_class(self.spec.map_digits)
        return self._sep_re, self._digit_re

    def normalize_text(self, text: str) -> str:
        """NFKC, casefold, optional diacritic and digit mapping; separators still in place."""
        s = unicodedata.normalize("NFKC", text).casefold()
        if self.spec.strip_diacritics:
            s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
            s = unicodedata.normalize("NFKC", s)
        if self.spec.map_digits:
            digit_re = self._unicode_res()[1]
            if digit_re is not None:
                s = digit_re.sub("0", s)
        return s

    def reference_tokens(self, text: str) -> list[bytes]:
        """The tokens of `text` by the definition, one whole-text pass (slow; the oracle)."""
        s = self.normalize_text(text)
        s = self._unicode_res()[0].sub(" ", s)
        # UTF-8 multi-byte sequences never contain ASCII bytes, so the byte table only
        # touches ASCII separators (and the already casefolded letters, idempotently).
        return s.encode("utf-8").translate(self._table).split()

    def tokens(self, text: str) -> list[bytes]:
        """The tokens of `text`, as UTF-8 bytes (equal to `reference_tokens`, faster)."""
        return self.tokens_utf8(text.encode("utf-8"))

    def tokens_utf8(self, raw: bytes) -> list[bytes]:
        """`tokens` of text given as its UTF-8 bytes (the scanner's hot path)."""
        if raw.isascii():
            # ASCII is NFKC-stable and casefolds to lower case: the byte table does it all.
            return raw.translate(self._table).split()
        # Mixed text: only the space-delimited words that hold non-ASCII bytes need the
        # Unicode treatment. No ASCII separator composes under NFKC with what follows it,
        # except '<', '=', '>' with U+0338, so such a word is normalised with that
        # character in front; then word-wise equals whole-text normalisation.
        mapped = raw.translate(self._mark_table)
        parts: list[bytes] = []
        cache = self._word_cache
        pos = 0
        i = mapped.find(b"\x80")
        while i >= 0:
            start = mapped.rfind(b" ", 0, i) + 1
            end = mapped.find(b" ", i)
            if end < 0:
                end = len(mapped)
            parts.append(mapped[pos:start])
            word = raw[start - 1 : end] if start and raw[start - 1] in b"<=>" else raw[start:end]
            norm = cache.get(word)
            if norm is None:
                if len(cache) >= _WORD_CACHE_LIMIT:
                    cache.clear()
                norm = cache[word] = b" ".join(self.reference_tokens(word.decode("utf-8")))
            parts.append(norm)
            pos = end
            i = mapped.find(b"\x80", end)
        parts.append(mapped[pos:])
        return b" ".join(parts).split()

    def tokens_with_spans(self, text: str) -> tuple[list[bytes], list[tuple[int, int]]]:
        """Tokens plus each token's [start, end) character span in the original `text`.

        Slow: used only for records that hold a match. Spans are exact when each
        whitespace-delimited chunk normalises character by character (all ASCII text and
        nearly all other text); a chunk that normalises only as a whole (NFKC composing
        across characters) maps each of its tokens to the whole chunk's span.
        """
        tokens = self.tokens(text)
        # norm_map[j] = (start, end) in `text` of the source of normalised character j.
        norm_parts: list[str] = []
        norm_map: list[tuple[int, int]] = []
        for m in re.finditer(r"\s+|\S+", text):
            chunk, base = m.group(), m.start()
            pieces = [self.normalize_text(c) for c in chunk]
            whole = self.normalize_text(chunk)
            if "".join(pieces) == whole:
                for i, p in enumerate(pieces):
                    norm_map.extend([(base + i, base + i + 1)] * len(p))
            else:
                norm_map.extend([(base, base + len(chunk))] * len(whole))
            norm_parts.append(whole)
        norm = "".join(norm_parts)
        sep_re = self._unicode_res()[0]
        norm = sep_re.sub(lambda m: " " * len(m.group()), norm)
        spans: list[tuple[int, int]] = []
        mapped: list[bytes] = []
        for m in _TOKEN_RE.finditer(norm.translate(_ASCII_SEP_STR)):
            mapped.append(m.group().encode("utf-8").translate(self._table))
            spans.append((norm_map[m.start()][0], norm_map[m.end() - 1][1]))
        if mapped != tokens:
            # Per-chunk normalisation disagreed with whole-text normalisation: fall back to
            # spans covering the whole text rather than report a wrong offset.
            return tokens, [(0, len(text))] * len(tokens)
        return tokens, spans


_ASCII_SEP_STR = {b: " " for b in _ASCII_SEPARATORS}
# Distinct non-ASCII words remembered per Normalizer; cleared when full so memory stays bounded.
_WORD_CACHE_LIMIT = 1 << 16
_TOKEN_RE = re.compile(r"[^ ]+")

DEFAULT_NORMALIZATION = NormalizationSpec()
