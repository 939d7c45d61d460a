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
from functools import lru_cache

#: `html.unescape`'s own pattern for a character reference, except that a name holds no
#: format character (those are dropped first: ``&l<ZWSP>t;`` is ``&lt;``).
_HTML = r"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;{cf}]{{1,32}};?)"
_BACKSLASH = (
    r"\\+(?:u[dD][89abAB][0-9a-fA-F]{2}\\+u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[ntr\"'/])"
    r"|\\{2,}"
)
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "/": "/"}


@lru_cache(maxsize=None)
def format_characters() -> str:
    """Every code point in Unicode category Cf (for the running Unicode version)."""
    return "".join(chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf")


@lru_cache(maxsize=None)
def _pattern() -> re.Pattern[str]:
    cf = "".join(f"\\U{ord(c):08x}" for c in format_characters())
    return re.compile(f"[{cf}]|{_HTML.format(cf=cf)}|{_BACKSLASH}")


@lru_cache(maxsize=1 << 14)
def _replacement(token: str) -> str:
    """What one match of the pass becomes."""
    first = token[0]
    if first == "&":
        return html.unescape(token)
    if first != "\\":
        return ""  # a format character
    body = token.lstrip("\\")
    if not body:
        return "\\"
    if body[0] != "u":
        return _SIMPLE[body]
    high = int(body[1:5], 16)
    if len(body) > 5:  # a surrogate pair
        low = int(body[-4:], 16)
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    return "\ufffd" if 0xD800 <= high < 0xE000 else chr(high)


def _pass(text: str) -> tuple[str, bool]:
    """One left-to-right pass, and whether it changed the text."""
    changed = False

    def repl(m: re.Match[str]) -> str:
        nonlocal changed
        out = _replacement(m.group())
        if out != m.group():
            changed = True
        return out

    out = _pattern().sub(repl, text)
    return out, changed


def decode(text: str) -> str:
    """`text` with format characters dropped and escapes decoded, repeatedly, until stable."""
    changed = True
    while changed:
        text, changed = _pass(text)
    return text


def decode_utf8(raw: bytes) -> bytes:
    """`decode` of UTF-8 text given as bytes (returns `raw` itself when nothing changes)."""
    # Format characters are never ASCII: ASCII text needs a look only when it holds '&' or '\'.
    if raw.isascii() and b"&" not in raw and b"\\" not in raw:
        return raw
    text = raw.decode("utf-8")
    out = decode(text)
    return raw if out == text else out.encode("utf-8")


def decode_with_map(text: str) -> tuple[str, list[int], list[int]]:
    """`decode(text)`, with ``starts[j], ends[j]``: the span of `text` decoded character j came from.

    A replaced character maps to the whole escape it came from.
    """
    starts = list(range(len(text)))
    ends = list(range(1, len(text) + 1))
    while True:
        out: list[str] = []
        new_starts: list[int] = []
        new_ends: list[int] = []
        pos = 0
        changed = False
        for m in _pattern().finditer(text):
            a, b = m.span()
            rep = _replacement(m.group())
            if rep == m.group():
                continue
            changed = True
            out.append(text[pos:a])
            new_starts.extend(starts[pos:a])
            new_ends.extend(ends[pos:a])
            out.append(rep)
            new_starts.extend([starts[a]] * len(rep))
            new_ends.extend([ends[b - 1]] * len(rep))
            pos = b
        if not changed:
            return text, starts, ends
        out.append(text[pos:])
        new_starts.extend(starts[pos:])
        new_ends.extend(ends[pos:])
        text, starts, ends = "".join(out), new_starts, new_ends
