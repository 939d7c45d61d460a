"""The scanned fields of a `msgpack.zst` block as the UTF-8 bytes stored, without decoding them.

The scanner hashes text as UTF-8, and msgpack stores it as UTF-8: decoding every string
into a `str` and encoding it back cost about as much as normalising it. A block is
unpacked at once with strings left as bytes, then packed again with every byte string as
a msgpack string: equal bytes prove that every string-like value was a string (not
`bin`), as the usual decoder (`unpack_records`) would have read it. Only then is the
text used. Otherwise (a `bin` value anywhere, a record that is not a map, a scanned
field that is missing, not a string or holding the byte 0xFF, a key or id that is not
UTF-8) `read` gives None and the caller decodes the block the usual way, which reports
the same errors as before. Strings of 32-255 bytes never repack equal (the packer writes
them in the old 16-bit form), so after the first block that does not, a reader leaves
the rest of its shard to the decoder at once.

Not checked here: that scanned text is UTF-8 (tokenising raises `UnicodeDecodeError` on
it), and that string values not scanned are (the loader decodes them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

_ERRORS = (msgpack.UnpackException, ValueError, TypeError, KeyError, AttributeError, IndexError)


@dataclass
class BlockText:
    """Per scanned field, the UTF-8 bytes of each record's value; and each record's id as stored."""

    fields: list[list[bytes]]
    #: A string id's UTF-8 bytes (checked), or the id value as unpacked (not a string).
    raw_ids: list[Any]
    #: The block's records as unpacked: keys and strings as UTF-8 bytes, every byte string a string.
    records: list[Any]

    def record_id(self, i: int) -> str | None:
        """Record `i`'s id as the scan reports it (`_Accumulator._record_id` of the decoded record)."""
        value = self.raw_ids[i]
        if type(value) is bytes:
            return value.decode("utf-8")
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return str(value)


class BlockTextReader:
    """Reads the scanned fields and record ids of one shard's blocks (see the module)."""

    def __init__(self, fields: list[str], id_field: str | None):
        self.fields = [name.encode("utf-8") for name in fields]
        self.id_field = id_field.encode("utf-8") if id_field is not None else None
        self.repack = True

    def read(self, payload: bytes) -> BlockText | None:
        """The block's text, or None: decode it the usual way."""
        if not self.repack:
            return None
        try:
            records = _repacked(payload)
            if records is None:
                self.repack = False  # this shard's writer stores strings repacking cannot check
                return None
            key = self.id_field
            ids = [record.get(key) for record in records] if key is not None else [None] * len(records)
            return self._text(records, ids)
        except _ERRORS:
            return None

    def _text(self, records: list[Any], ids: list[Any]) -> BlockText | None:
        out = []
        for key in self.fields:
            values = [record[key] for record in records]
            if values and (set(map(type, values)) != {bytes} or b"\xff" in b"".join(values)):
                return None  # 0xFF, never in UTF-8, would split a text in the tokeniser's batch
            out.append(values)
        # Joined by spaces, the keys and string ids are UTF-8 exactly when each of them is.
        b" ".join(set().union(*records)).decode("utf-8")
        b" ".join(i for i in ids if type(i) is bytes).decode("utf-8")
        return BlockText(out, ids, records)


def _repacked(payload: bytes) -> list[Any] | None:
    """The block's records with strings as bytes, if packing them again gives the block back."""
    unpacker = msgpack.Unpacker(raw=True, max_buffer_size=max(len(payload), 1 << 20))
    unpacker.feed(payload)
    records: list[Any] = list(unpacker)
    # Pre-sized: packing into a growing buffer costs twice as much.
    packer = msgpack.Packer(use_bin_type=False, autoreset=False, buf_size=len(payload) + 64)
    for record in records:
        packer.pack(record)
    return records if packer.bytes() == payload else None
