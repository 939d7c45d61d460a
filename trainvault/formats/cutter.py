"""Cutting a shard's blocks out of its bytes as they arrive, each checked against the
descriptor's block index before anyone decodes it.

For readers that are fed a stream they do not own (the gate's hash pass) as much as for
those that pull one: the caller hands chunks in object order and gets back the blocks
completed so far. Memory holds at most one block plus one chunk.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from trainvault.errors import IntegrityError
from trainvault.formats.blocks import BlockRef


class BlockCutter:
    """Yields (block number, bytes) of each block of `blocks` as the chunks that complete it arrive."""

    def __init__(self, uri: str, blocks: Sequence[BlockRef]):
        self.uri, self.blocks = uri, blocks
        self.next = 0  # the next block to complete
        self._buf = bytearray()
        self._pos = 0  # object offset of _buf[0]

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        """The blocks `chunk` completes, each matching its descriptor digest (`IntegrityError` otherwise)."""
        self._buf += chunk
        out = []
        while self.next < len(self.blocks):
            b = self.blocks[self.next]
            skip = b.offset - self._pos
            if len(self._buf) < skip + b.length:
                break
            data = bytes(self._buf[skip : skip + b.length])
            del self._buf[: skip + b.length]
            self._pos = b.offset + b.length
            if hashlib.sha256(data).hexdigest() != b.sha256:
                raise IntegrityError(
                    f"{self.uri}: block {self.next} sha256 does not match the descriptor; the shard "
                    "was changed after it was published: rebuild it"
                )
            out.append((self.next, data))
            self.next += 1
        return out

    @property
    def done(self) -> bool:
        """Every block was cut out."""
        return self.next == len(self.blocks)
