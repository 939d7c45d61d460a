"""Which record fields carry text a verifier contract could find a benchmark item in.

The scan matches an item only inside one field value, and an item of fewer than the
contract's ``min_item_tokens`` tokens is uncheckable, so a string with fewer tokens cannot
hide an item the contract detects: ids, labels and language codes are not text here. A
field carries text when some record holds a string of at least that many tokens in it
(under the contract's normalisation). Fields are named by dotted paths: ``meta.title`` for a
key of a mapping, and a list is its own field (``tags``: its strings joined, as a reader
may join them; ``messages.content``: a key of the mappings it holds). Bytes that decode as
UTF-8 (msgpack ``bin``, a Parquet binary column, a list of bytes) are text here, as a
reader that decodes them sees it; other bytes are not. The contract's
scanned fields are not surveyed. `TextFieldSurvey.observe` is fed blocks of records by
whichever pass reads them (the gate's re-scan).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainvault.contamination.contract import VerifierContract
from trainvault.contamination.normalize import Normalizer

#: Value types that hold no text (checked by exact type: the common case costs one lookup).
_SCALARS = frozenset({int, float, bool, type(None)})


class TextFieldSurvey:
    """The text-carrying fields of the records observed, outside the contract's scanned fields."""

    def __init__(self, contract: VerifierContract, normalizer: Normalizer | None = None):
        self.min_tokens = contract.method.min_item_tokens
        self.scanned = frozenset(contract.fields)
        self.normalizer = normalizer or Normalizer(contract.method.normalization)
        #: Dotted paths found to carry text (a value of at least `min_tokens` tokens).
        self.text_fields: set[str] = set()
        # Top-level keys not to read again: scanned, or already found to carry text.
        self._skip: set[str] = set(self.scanned)
        self._skip_raw: set[bytes] = {f.encode("utf-8", "surrogatepass") for f in self.scanned}

    def observe(self, records: Iterable[Any], *, raw: bool = False) -> None:
        """Survey a block of records; `raw`: strings and keys are UTF-8 `bytes` (msgpack read with
        ``raw=True``, every byte string checked to be a string), otherwise `str`."""
        skip = self._skip_raw if raw else self._skip
        values: dict[Any, list[bytes]] = {}  # top-level keys as stored, nested fields by path
        for record in records:
            if type(record) is not dict and not isinstance(record, Mapping):
                continue  # the scan refuses such a record itself
            for key, value in record.items():
                if key in skip:
                    continue
                kind = type(value)
                if kind is str:
                    values.setdefault(key, []).append(value.encode("utf-8", "surrogatepass"))
                elif kind is bytes:
                    if raw or _is_utf8(value):
                        values.setdefault(key, []).append(value)
                elif _may_hold_text(kind):
                    _strings(value, _name(key, raw), values, raw)
        by_path: dict[str, list[bytes]] = {}
        for key, texts in values.items():
            by_path.setdefault(_name(key, raw), []).extend(texts)
        for path, texts in by_path.items():
            if path not in self.text_fields and self._longest(texts) >= self.min_tokens:
                self.text_fields.add(path)
                self._skip.add(path)
                self._skip_raw.add(path.encode("utf-8", "surrogatepass"))

    def _longest(self, texts: list[bytes]) -> int:
        """The most tokens any of `texts` has (0xFF or malformed UTF-8 read as replacement characters)."""
        if any(b"\xff" in t for t in texts):
            texts = [_repaired(t) for t in texts]
        try:
            batch = self.normalizer.tokenize_batch(texts)
        except UnicodeDecodeError:
            batch = self.normalizer.tokenize_batch([_repaired(t) for t in texts])
        bounds = [*batch.text_starts(), len(batch) + 1]
        return max(bounds[t + 1] - bounds[t] - 1 for t in range(len(texts)))


_HOLDS_TEXT: dict[type, bool] = {}


def _may_hold_text(kind: type) -> bool:
    """Whether values of type `kind` can hold strings: mappings, lists, tuples (not subclasses such as
    msgpack's ExtType) and NumPy arrays (of strings); cached per type, the check runs per value."""
    known = _HOLDS_TEXT.get(kind)
    if known is None:
        known = _HOLDS_TEXT[kind] = (
            kind in (dict, list, tuple) or issubclass(kind, Mapping) or hasattr(kind, "dtype")
        ) and kind not in _SCALARS
    return known


def _repaired(text: bytes) -> bytes:
    return text.decode("utf-8", "replace").encode("utf-8")


def _name(key: Any, raw: bool) -> str:
    if raw and isinstance(key, bytes):
        return key.decode("utf-8", "replace")
    return str(key)


def _is_utf8(value: bytes) -> bool:
    """Whether `value` decodes as UTF-8 (strictly): text stored as bytes (msgpack `bin`, a Parquet
    binary column), which a reader may decode and train on, so surveyed as text."""
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _is_string(value: Any, raw: bool) -> bool:
    return type(value) is str or (type(value) is bytes and (raw or _is_utf8(value)))


def _utf8(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")


def _strings(value: Any, path: str, out: dict[Any, list[bytes]], raw: bool) -> None:
    """Append to ``out[path]`` each string `value` holds, by dotted path (iterative: records may nest deep)."""
    stack = [(value, path)]
    while stack:
        node, where = stack.pop()
        kind = type(node)
        if kind is str or (kind is bytes and (raw or _is_utf8(node))):
            out.setdefault(where, []).append(_utf8(node))
        elif kind is dict or (_may_hold_text(kind) and isinstance(node, Mapping)):
            stack.extend((sub, f"{where}.{_name(key, raw)}") for key, sub in node.items())
        elif kind is list or kind is tuple:  # not msgpack's ExtType (a tuple): an array, not text
            words = [_utf8(v) for v in node if _is_string(v, raw)]
            if words:
                out.setdefault(where, []).append(b" ".join(words))
            stack.extend((v, where) for v in node if not _is_string(v, raw))
        elif getattr(getattr(node, "dtype", None), "kind", None) == "U":  # a NumPy array of strings
            stack.append((node.tolist(), where))


def exempt(path: str, names: Iterable[str]) -> bool:
    """Whether `names` (a policy's unscanned fields) exempt `path`: a name exempts itself and every field below it."""
    return any(path == n or path.startswith(n + ".") for n in names)
