"""tvnorm-v2's first step: text as scrapers store it, back to the text as written.

One pass, left to right, replaces each of these (and leaves everything else alone):

- a Unicode format character (category ``Cf``: zero-width space, word joiner, soft
  hyphen, BOM, bidi marks, tags) by nothing;
- an HTML character reference, named or numeric, by what `html.unescape` gives for it;
- a run of backslashes followed by ``u`` and four hex digits (a UTF-16 surrogate pair as
  two such escapes), or by one of ``n t r " ' /``, by the character it escapes (a lone
  surrogate by U+FFFD); two or more backslashes followed by none of these by one backslash.

`decode` repeats the pass until it changes nothing, so text escaped twice (``&amp;lt;``,
a JSON dump of source holding ``\\n``) decodes like text escaped once, and decoding is
idempotent. Every replacement is shorter than what it replaces, so the loop ends.
`decode_with_map` also says where each decoded character came from in the original.
"""

from __future__ import annotations

import html
import re
import sys
import unicodedata
from collections.abc import Iterator
from functools import cache, lru_cache
from itertools import accumulate, compress

#: `html.unescape`'s own pattern for a character reference, on UTF-8 bytes, except that a
#: name holds neither non-ASCII bytes nor a backslash. No HTML5 name does, so references
#: decode the same; but ``&x\n`` is not taken whole and left alone, its ``\n`` decodes,
#: and ``&l<ZWSP>t;`` loses its format character first, like everywhere else.
_HTML = rb"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;\\\x80-\xff]{1,32};?)"
_BACKSLASH = (
    rb"\\+(?:u[dD][89abAB][0-9a-fA-F]{2}\\+u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[ntr\"'/])"
    rb"|\\{2,}"
)
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "/": "/"}


@cache
def format_characters() -> str:
    """Every code point in Unicode category Cf (for the running Unicode version)."""
    return "".join(chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf")


@cache
def _patterns() -> tuple[bytes, re.Pattern[bytes], re.Pattern[bytes]]:
    """(a `bytes.translate` table of where a replacement may start, a pattern of those places,
    the replacement at such a place), over UTF-8.

    The table maps ``&`` and ``\\`` to 1, the first byte of every format character to 2
    and every other byte to 0. Text without a 2 has its places found by `bytes.find`
    (memchr), ten times faster than scanning with the pattern, which is literal
    alternatives only. The replacement is tried at each place in order, like one
    `re.sub` of it.
    """
    chars = [c.encode("utf-8") for c in format_characters()]
    marks = bytearray(256)
    for c in chars:
        marks[c[0]] = 2
    marks[ord("&")] = marks[ord("\\")] = 1
    cf = b"|".join(re.escape(c) for c in chars)
    return bytes(marks), re.compile(rb"&|\\|" + cf), re.compile(cf + b"|" + _HTML + b"|" + _BACKSLASH)


@lru_cache(maxsize=1 << 14)
def _replacement(token: bytes) -> bytes:
    """What one replaced escape (or format character) becomes."""
    first = token[:1]
    if first == b"&":
        return html.unescape(token.decode("ascii")).encode("utf-8")
    if first != b"\\":
        return b""  # a format character
    body = token.lstrip(b"\\").decode("ascii")
    if not body:
        return b"\\"
    if body[0] != "u":
        return _SIMPLE[body].encode("ascii")
    high = int(body[1:5], 16)
    if len(body) > 5:  # a surrogate pair
        low = int(body[-4:], 16)
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)).encode("utf-8")
    return ("\ufffd" if 0xD800 <= high < 0xE000 else chr(high)).encode("utf-8")


def _pass(raw: bytes) -> list[tuple[int, int, bytes]]:
    """One left-to-right pass: the replacements ``(start, end, new bytes)`` that change `raw`."""
    out = []
    done = 0
    for a in _places(raw):
        if a < done:
            continue
        mm = _patterns()[2].match(raw, a)
        if mm is None:
            continue
        done = mm.end()
        rep = _replacement(mm.group())
        if rep != mm.group():
            out.append((a, done, rep))
    return out


def _places(raw: bytes) -> Iterator[int]:
    """In order, every offset of `raw` where ``&``, ``\\`` or a format character starts."""
    marks, find, _ = _patterns()
    places = raw.translate(marks)
    if places.find(2) >= 0:
        yield from (m.start() for m in find.finditer(raw))
        return
    a = places.find(1)
    while a >= 0:
        yield a
        a = places.find(1, a + 1)


def _apply(raw: bytes, reps: list[tuple[int, int, bytes]]) -> bytes:
    parts = []
    pos = 0
    for a, b, rep in reps:
        parts.append(raw[pos:a])
        parts.append(rep)
        pos = b
    parts.append(raw[pos:])
    return b"".join(parts)


def decode_utf8(raw: bytes) -> bytes:
    """`decode` of UTF-8 text given as bytes (returns `raw` itself when nothing changes)."""
    if raw.isascii() and b"&" not in raw and b"\\" not in raw:
        return raw  # format characters are never ASCII
    reps = _pass(raw)
    while reps:
        raw = _apply(raw, reps)
        reps = _pass(raw)
    return raw


def decode(text: str) -> str:
    """`text` with format characters dropped and escapes decoded, repeatedly, until stable."""
    raw = text.encode("utf-8")
    out = decode_utf8(raw)
    return text if out is raw else out.decode("utf-8")


def decode_with_map(text: str) -> tuple[str, list[int], list[int]]:
    """`decode(text)`, with ``starts[j], ends[j]``: the span of `text` decoded character j came from.

    A replaced character maps to the whole escape it came from.
    """
    raw = original = text.encode("utf-8")
    reps = _pass(raw)
    if not reps:
        return text, list(range(len(text))), list(range(1, len(text) + 1))
    # Per byte of the current text: the original byte span it came from.
    starts = list(range(len(raw)))
    ends = list(range(1, len(raw) + 1))
    while reps:
        new_starts: list[int] = []
        new_ends: list[int] = []
        pos = 0
        for a, b, rep in reps:
            new_starts += starts[pos:a] + [starts[a]] * len(rep)
            new_ends += ends[pos:a] + [ends[b - 1]] * len(rep)
            pos = b
        starts, ends = new_starts + starts[pos:], new_ends + ends[pos:]
        raw = _apply(raw, reps)
        reps = _pass(raw)
    # Byte offsets to character offsets, in the original and in the decoded text:
    # char_at[j] holds original byte j; char_end[j] characters start before byte j.
    if len(original) == len(text):
        char_at: list[int] = list(range(len(text)))
        char_end = list(range(len(text) + 1))
    else:
        char_end = list(accumulate(original.translate(_LEAD), initial=0))
        char_at = [c - 1 for c in char_end[1:]]
    decoded = raw.decode("utf-8")
    if decoded.isascii():
        return decoded, list(map(char_at.__getitem__, starts)), list(map(char_end.__getitem__, ends))
    firsts = list(compress(range(len(raw)), raw.translate(_LEAD)))  # first byte of each character
    ends_before = [0, *ends]  # ends_before[j] == ends[j - 1]: the last byte before character j
    lasts = [*map(ends_before.__getitem__, firsts[1:]), *ends[-1:]]
    return (
        decoded,
        list(map(char_at.__getitem__, map(starts.__getitem__, firsts))),
        list(map(char_end.__getitem__, lasts)),
    )


# 1 for a byte that starts a UTF-8 character, 0 for a continuation byte.
_LEAD = bytes(0 if 0x80 <= b < 0xC0 else 1 for b in range(256))
