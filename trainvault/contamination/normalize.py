"""tvnorm-v1 and tvnorm-v2: the text normalisation both sides of a contamination scan share.

tvnorm-v2 first decodes text as scrapers store it (`trainvault.contamination.escapes`:
format characters dropped, HTML references and backslash escapes decoded), then applies
tvnorm-v1 to the result. In tvnorm-v1, a token is a maximal run of characters that are
neither whitespace (`str.isspace`) nor in a Unicode category ``P*`` or ``S*``, taken
after NFKC and ``casefold()``. Digits and diacritics are kept unless the spec switches on
``map_digits`` (every decimal digit becomes ``0``) or ``strip_diacritics`` (NFD, drop
``Mn``, NFKC again).

Tokens are returned as UTF-8 `bytes`: the hot path works on bytes, and the n-gram
fingerprints hash bytes, so no side ever decodes them back.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from typing import Any, Final, Literal

from pydantic import Field, field_validator

from trainvault.contamination.escapes import decode, decode_utf8, decode_with_map
from trainvault.contamination.token_batch import TokenBatch, splice
from trainvault.documents import StrictModel

NORMALIZATION_ID: Final = "tvnorm-v2"
NORMALIZATION_V1: Final = "tvnorm-v1"

# Whitespace that `bytes.split()` does not split on but `str.isspace` does: the ASCII
# information separators. The byte table turns them into spaces so both agree.
_ASCII_SEPARATORS = bytes(b for b in range(128) if chr(b).isspace() or unicodedata.category(chr(b))[0] in "PS")


def _punctuation_and_symbols() -> list[Literal["P", "S"]]:
    return ["P", "S"]


class NormalizationSpec(StrictModel):
    """The recorded parameters of the normalisation (they go into the contract and the report)."""

    id: Literal["tvnorm-v1", "tvnorm-v2"] = NORMALIZATION_ID
    nfkc: Literal[True] = True
    casefold: Literal[True] = True
    strip_categories: list[Literal["P", "S"]] = Field(default_factory=_punctuation_and_symbols)
    map_digits: bool = False
    strip_diacritics: bool = False

    @field_validator("strip_categories")
    @classmethod
    def _categories(cls, value: list[str]) -> list[str]:
        if value != ["P", "S"]:
            raise ValueError('tvnorm strips exactly the categories ["P", "S"]')
        return value


#: Above this no code point is whitespace or in P*/S* (checked by the tests for the
#: running Unicode version); scanning only planes 0 and 1 keeps the table build short.
SEPARATOR_LIMIT = 0x20000


@cache
def unicode_table(map_digits: bool) -> dict[int, str]:
    """`str.translate` table: non-ASCII whitespace and P*/S* to a space (digits to ``0``).

    One character in, one out, so offsets in the translated text stay valid. Built once
    per process.
    """
    table: dict[int, str] = {}
    for cp in range(128, SEPARATOR_LIMIT):
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat[0] in "PS" or ch.isspace():
            table[cp] = " "
        elif map_digits and cat == "Nd":
            table[cp] = "0"
    return table


@cache
def simple_chars(map_digits: bool, strip_diacritics: bool, drop_format: bool = False) -> Any:
    """Bool array over code points below `SEPARATOR_LIMIT`: characters the normaliser leaves alone.

    A simple character is not whitespace nor in P*, S*, Z*; has combining class 0; is its
    own NFKC and its own casefold (and NFD, and not ``Mn``, with `strip_diacritics`; not a
    decimal digit with `map_digits`); and is never the second character of a canonical
    composition (nor a Hangul vowel or trailing jamo); with `drop_format` (tvnorm-v2), not
    in category ``Cf``. A word made of ASCII token bytes and simple characters normalises
    to itself with its ASCII lower-cased: nothing in it composes, reorders, folds or
    separates. Built once per process.
    """
    from trainvault.extras import require

    np = require("numpy", "contamination")
    second: set[int] = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for cp in range(SEPARATOR_LIMIT):
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<"):
            parts = d.split()
            if len(parts) == 2:
                second.add(int(parts[1], 16))
    out = np.zeros(SEPARATOR_LIMIT, dtype=np.bool_)
    for cp in range(128, SEPARATOR_LIMIT):
        if cp in second:
            continue
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat[0] in "PSZ" or cat == "Cs" or ch.isspace() or unicodedata.combining(ch):
            continue
        if drop_format and cat == "Cf":
            continue
        if unicodedata.normalize("NFKC", ch) != ch or ch.casefold() != ch:
            continue
        if map_digits and cat == "Nd":
            continue
        if strip_diacritics and (cat == "Mn" or unicodedata.normalize("NFD", ch) != ch):
            continue
        out[cp] = True
    return out


class Normalizer:
    """Tokenises text under one `NormalizationSpec`. Build once; `tokens` is the hot path."""

    def __init__(self, spec: NormalizationSpec | None = None):
        self.spec = spec or NormalizationSpec()
        #: tvnorm-v2 decodes scraped text first; tvnorm-v1 takes it as it is.
        self.decodes = self.spec.id != NORMALIZATION_V1
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
        # For batches, keeping non-ASCII bytes: 0xFF (never in UTF-8) joins texts and becomes
        # the marker token "A", which no normalised token equals (tokens are casefolded).
        self._keep_table = bytes(table[:128]) + bytes(range(128, 255)) + b"A"
        # Original bytes of a word holding non-ASCII -> its tokens.
        self._word_cache: dict[bytes, tuple[bytes, ...]] = {}
        self._unicode: dict[int, str] | None = None

    def _unicode_table(self) -> dict[int, str]:
        if self._unicode is None:
            self._unicode = unicode_table(self.spec.map_digits)
        return self._unicode

    def normalize_text(self, text: str) -> str:
        """NFKC, casefold, optional diacritic stripping; separators and digits still in place."""
        s = unicodedata.normalize("NFKC", text).casefold()
        if self.spec.strip_diacritics:
            s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
            s = unicodedata.normalize("NFKC", s)
        return s

    def decode(self, text: str) -> str:
        """`text` as tvnorm-v2 decodes it (`escapes.decode`); itself under tvnorm-v1."""
        return decode(text) if self.decodes else text

    def reference_tokens(self, text: str) -> list[bytes]:
        """The tokens of `text` by the definition, one whole-text pass (slow; the oracle)."""
        return self._decoded_reference_tokens(self.decode(text))

    def _decoded_reference_tokens(self, text: str) -> list[bytes]:
        """`reference_tokens` of text already decoded."""
        s = self.normalize_text(text).translate(self._unicode_table())
        # UTF-8 multi-byte sequences never contain ASCII bytes, so the byte table only
        # touches ASCII separators (and the already casefolded letters, idempotently).
        return s.encode("utf-8").translate(self._table).split()

    def tokens(self, text: str) -> list[bytes]:
        """The tokens of `text`, as UTF-8 bytes (equal to `reference_tokens`, faster)."""
        return self.tokens_utf8(text.encode("utf-8"))

    def tokens_utf8(self, raw: bytes) -> list[bytes]:
        """`tokens` of text given as its UTF-8 bytes."""
        return self.normalized_utf8(raw).split()

    def normalized_utf8(self, raw: bytes) -> bytes:
        """UTF-8 text whose space-separated words are exactly the tokens of `raw`.

        The result holds no ASCII byte other than lower-case letters, digits, controls and
        the space, so a caller may join results with a marker (say ``b" A "``) that no
        token can equal.
        """
        if self.decodes:
            raw = decode_utf8(raw)
        if raw.isascii():
            # ASCII is NFKC-stable and casefolds to lower case: the byte table does it all.
            return raw.translate(self._table)
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
                norm = cache[word] = tuple(self.reference_tokens(word.decode("utf-8")))
            parts.append(b" ".join(norm))
            pos = end
            i = mapped.find(b"\x80", end)
        parts.append(mapped[pos:])
        return b" ".join(parts)

    def tokenize_batch(self, texts: list[bytes]) -> TokenBatch:
        """Tokens of many UTF-8 texts at once, as offsets into one byte string.

        Vectorised: one translate and a few numpy passes for the whole batch. Words
        holding non-ASCII bytes keep their bytes when every such character is one that
        tvnorm-v1 leaves alone (see `simple_chars`; decoded and checked with numpy);
        the others are normalised one by one (and cached). Texts are separated by the
        marker token ``A``. Texts must not hold the byte 0xFF (UTF-8 never does; other
        malformed UTF-8 raises `UnicodeDecodeError`).
        """
        from trainvault.extras import require

        np = require("numpy", "contamination")
        raw = b" " + b" \xff ".join(texts) + b" "
        if self.decodes and (b"&" in raw or b"\\" in raw):
            # An escape may span words: decode the whole batch (0xFF is in no escape).
            # Otherwise only format characters can change; they are not simple characters
            # under tvnorm-v2, so the words holding them are normalised one by one.
            raw = decode_utf8(raw)
        mapped = raw.translate(self._keep_table)
        arr = np.frombuffer(mapped, dtype=np.uint8)
        word = arr != 0x20
        # edge[i]: a token starts or ends at byte i (byte 0 is a space: never).
        edge = np.empty(len(arr), dtype=np.bool_)
        edge[0] = False
        np.not_equal(word[1:], word[:-1], out=edge[1:])
        bounds = np.flatnonzero(edge)
        starts, ends = bounds[0::2], bounds[1::2]
        hi = np.flatnonzero(arr >= 0x80)
        if not len(hi):
            return TokenBatch(mapped, starts, ends, len(texts))
        # Tokens that need the per-word treatment: those holding a character that is not
        # simple, or every token with a non-ASCII byte if the UTF-8 is not well formed
        # (the per-word path then raises on it).
        slow = self._slow_positions(np, arr, hi)
        if not len(slow):
            return TokenBatch(mapped, starts, ends, len(texts))
        tok = np.searchsorted(starts, slow, side="right") - 1
        tok = tok[np.concatenate(([True], tok[1:] != tok[:-1]))]
        norms = self._word_norms(raw, list(zip(starts[tok].tolist(), ends[tok].tolist(), strict=False)))
        return splice(np, mapped, starts, ends, tok, norms, len(texts))

    def _word_norms(self, raw: bytes, pairs: list[tuple[int, int]]) -> list[tuple[bytes, ...]]:
        """The normalised tokens of each word ``raw[a:b]`` that needs per-word treatment (cached)."""
        cache = self._word_cache
        keys = [raw[a:b] for a, b in pairs]
        if any(b"\xcc\xb8" in key for key in keys):
            # U+0338 (never simple, so only in these words): '<', '=', '>' may compose
            # with it (see `normalized_utf8`); only a word holding it can compose.
            keys = [raw[a - 1 : b] if raw[a - 1] in b"<=>" and b"\xcc\xb8" in raw[a:b] else raw[a:b] for a, b in pairs]
        hits = list(map(cache.get, keys))
        if None in hits and len(cache) >= _WORD_CACHE_LIMIT:
            cache.clear()
        return [self._cache_word(key) if hit is None else hit for key, hit in zip(keys, hits, strict=True)]

    def _cache_word(self, key: bytes) -> tuple[bytes, ...]:
        norm = self._word_cache[key] = tuple(self.reference_tokens(key.decode("utf-8")))
        return norm

    def _slow_positions(self, np: Any, arr: Any, hi: Any) -> Any:
        """Positions (in `arr`) of non-ASCII characters that need per-word normalisation.

        `hi` are the positions of all bytes >= 0x80 (0xFF, the text separator, is not
        among them: it was mapped to ``A``). When the bytes are not well-formed UTF-8,
        all of `hi` is returned.
        """
        b = arr[hi]
        lead = b >= 0xC0
        pos = hi[lead]
        b0 = b[lead].astype(np.int32)
        n = len(arr)
        p1 = np.minimum(pos + 1, n - 1)
        p2 = np.minimum(pos + 2, n - 1)
        p3 = np.minimum(pos + 3, n - 1)
        b1 = arr[p1].astype(np.int32)
        b2 = arr[p2].astype(np.int32)
        b3 = arr[p3].astype(np.int32)
        two = b0 < 0xE0
        three = (b0 >= 0xE0) & (b0 < 0xF0)
        c1, c2, c3 = (b1 & 0xC0) == 0x80, (b2 & 0xC0) == 0x80, (b3 & 0xC0) == 0x80
        cp = np.where(
            two,
            ((b0 & 0x1F) << 6) | (b1 & 0x3F),
            np.where(
                three,
                ((b0 & 0x0F) << 12) | ((b1 & 0x3F) << 6) | (b2 & 0x3F),
                ((b0 & 0x07) << 18) | ((b1 & 0x3F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F),
            ),
        )
        ok = np.where(two, c1 & (cp >= 0x80), np.where(three, c1 & c2 & (cp >= 0x800), c1 & c2 & c3 & (cp >= 0x10000)))
        ok &= b0 < 0xF5
        # Every continuation byte must belong to exactly one (valid) lead.
        width = np.where(two, 1, np.where(three, 2, 3))
        if not ok.all() or int(width.sum()) != len(hi) - len(pos):
            return hi
        simple = simple_chars(self.spec.map_digits, self.spec.strip_diacritics, self.decodes)
        inside = cp < len(simple)
        good = inside.copy()
        good[inside] = simple[cp[inside]]
        return pos[~good]

    def tokens_with_spans(self, text: str) -> tuple[list[bytes], list[tuple[int, int]]]:
        """Tokens plus each token's [start, end) character span in the original `text`.

        Slow: used only for records that hold a match. Spans are exact when each
        whitespace-delimited chunk normalises character by character (all ASCII text and
        nearly all other text); a chunk that normalises only as a whole (NFKC composing
        across characters) maps each of its tokens to the whole chunk's span. Under
        tvnorm-v2 a token that holds a decoded escape spans the whole escape.
        """
        if not self.decodes:
            return self._decoded_spans(text)
        decoded, starts, ends = decode_with_map(text)
        tokens, spans = self._decoded_spans(decoded)
        return tokens, [(starts[a], ends[b - 1]) for a, b in spans]

    def _decoded_spans(self, text: str) -> tuple[list[bytes], list[tuple[int, int]]]:
        """`tokens_with_spans` of text already decoded, spans in `text`."""
        tokens = self._decoded_reference_tokens(text)
        if text.isascii():
            # NFKC-stable, casefold is lower(), one character each: a token spans its bytes.
            return tokens, [m.span() for m in _TOKEN_BYTES_RE.finditer(text.encode("ascii").translate(self._table))]
        # starts[j], ends[j]: the span in `text` of the source of byte j of the normalised
        # UTF-8 (separators still in place). Only whitespace-delimited chunks holding
        # non-ASCII need care; ASCII between them is its own NFKC (and NFD) and casefolds
        # to lower(), one character (byte) each.
        table = self._unicode_table()
        parts: list[str] = []
        starts: list[int] = []
        ends: list[int] = []
        pos = 0
        for a, b in _non_ascii_chunks(text):
            parts.append(text[pos:a].lower())
            starts.extend(range(pos, a))
            ends.extend(range(pos + 1, a + 1))
            pos = b
            pieces = [self.normalize_text(c) for c in text[a:b]]
            whole = self.normalize_text(text[a:b])
            if "".join(pieces) == whole:
                for i, p in enumerate(pieces):
                    size = len(p.translate(table).encode("utf-8"))  # one character in, one out
                    starts.extend([a + i] * size)
                    ends.extend([a + i + 1] * size)
            else:
                size = len(whole.translate(table).encode("utf-8"))
                starts.extend([a] * size)
                ends.extend([b] * size)
            parts.append(whole.translate(table))
        parts.append(text[pos:].lower())
        starts.extend(range(pos, len(text)))
        ends.extend(range(pos + 1, len(text) + 1))
        norm = "".join(parts).encode("utf-8").translate(self._table)
        spans = [(starts[m.start()], ends[m.end() - 1]) for m in _TOKEN_BYTES_RE.finditer(norm)]
        mapped = norm.split()
        if mapped != tokens:
            # Per-chunk normalisation disagreed with whole-text normalisation: fall back to
            # spans covering the whole text rather than report a wrong offset.
            return tokens, [(0, len(text))] * len(tokens)
        return tokens, spans


# Distinct non-ASCII words remembered per Normalizer; cleared when full so memory stays bounded.
_WORD_CACHE_LIMIT = 1 << 16
_TOKEN_BYTES_RE = re.compile(rb"[^ ]+")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _non_ascii_chunks(text: str) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of whitespace, or of non-whitespace, holding non-ASCII."""
    out: list[tuple[int, int]] = []
    n = len(text)
    m = _NON_ASCII.search(text)
    while m is not None:
        i = m.start()
        space = text[i].isspace()
        a = i
        while a > 0 and text[a - 1].isspace() == space:
            a -= 1
        b = i + 1
        while b < n and text[b].isspace() == space:
            b += 1
        out.append((a, b))
        m = _NON_ASCII.search(text, b)
    return out
