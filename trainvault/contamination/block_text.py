"""The scanned fields of a `msgpack.zst` block as the UTF-8 bytes stored, without decoding them.

The scanner hashes text as UTF-8, and msgpack stores it as UTF-8: decoding every string
into a `str` and encoding it back cost about as much as normalising it. Here the block
is unpacked with strings left as bytes, and then packed again with every byte string as
a msgpack string: the result equals the block exactly when every string-like value in
it was a string (not `bin`) and the block is in the encoder's own shortest form. Only
then are the bytes used; for anything else (a `bin` value anywhere, a record that is not
a map, a scanned field that is missing or not a string, an id that is not UTF-8, another
encoder's layout) `block_text` returns None and the caller decodes the block the usual
way, which reports the same errors as before.

What is not checked here: that scanned text is UTF-8 (tokenising raises
`UnicodeDecodeError` on it), and that values the scan does not read are (strings
in other fields stay undecoded; the loader decodes and checks them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack



@dataclass
class BlockText:
    """Per scanned field, the UTF-8 bytes of each record's value; and each record's id as stored."""

    fields: list[list[bytes]]
    #: A string id's UTF-8 bytes (checked), or the id value as unpacked.
    raw_ids: list[Any]

    def record_id(self, i: int) -> str | None:
        """Record `i`'s id as the scan reports it (`_Accumulator._record_id` of the decoded record)."""
        value = self.raw_ids[i]
        if type(value) is bytes:
            return value.decode("utf-8")
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return str(value)


def block_text(payload: bytes, fields: list[str], id_field: str | None) -> BlockText | None:
    """The scanned fields and record ids of the msgpack records in `payload`, or None (see the module)."""
    try:
        unpacker = msgpack.Unpacker(raw=True, max_buffer_size=max(len(payload), 1 << 20))
        unpacker.feed(payload)
        records: list[Any] = list(unpacker)
        # Pre-sized: packing into a growing buffer costs twice as much.
        packer = msgpack.Packer(use_bin_type=False, autoreset=False, buf_size=len(payload) + 64)
        for record in records:
            packer.pack(record)
        if packer.bytes() != payload:
            return None
        out = []
        for name in fields:
            key = name.encode("utf-8")
            values = [record[key] for record in records]
            if values and set(map(type, values)) != {bytes}:
                return None
            out.append(values)
        ids: list[Any] = [None] * len(records)
        if id_field is not None:
            key = id_field.encode("utf-8")
            ids = [record.get(key) for record in records]
            # Joined by spaces, the string ids are UTF-8 exactly when each of them is.
            b" ".join(i for i in ids if type(i) is bytes).decode("utf-8")
    except (msgpack.UnpackException, ValueError, TypeError, KeyError, AttributeError):
        return None
    return BlockText(out, ids)
