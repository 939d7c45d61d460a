"""The gate's check of bound component ledgers: every range's tokens, once, at approval.

When an approval request binds ``<split>_component_ledger``, the gate opens that ledger
(`open_ledger`: parts by digest, frames, overlaps, range and record ids, predecessor
custody) and, while it streams each of the split's shards to hash it, verifies each
block against the shard's descriptor, decodes it from those same bytes and checks every
record against the ledger (`check_read`) and every range's tokens against their sha256.
A refusal names range, record and shard.

After approval no read hashes a range again: each block read is checked against the
approved descriptor, which proves its tokens are the ones checked here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from trainvault.components.custody import CheckedLedger, CompiledShard, open_ledger, read_record, where
from trainvault.components.ledger import ledger_sidecar_name
from trainvault.errors import CustodyError, IntegrityError, ManifestError, TrainVaultError
from trainvault.formats.cutter import BlockCutter
from trainvault.publication.manifest import DataManifest, ShardEntry
from trainvault.publication.reader import ShardReader, read_descriptor
from trainvault.storage import Storage
from trainvault.uris import normalize_uri


def check_ranges(shard: CompiledShard, index: int, record: Any) -> None:
    """Record `index` of `shard` is the one the ledger describes and each range's tokens match their sha256."""
    pid, ids, _, ranges = read_record(shard, index, record)
    for r in ranges:
        rid, lo, hi = r.range_id, r.row_lo, r.row_hi
        if hashlib.sha256(ids[lo:hi]).hexdigest() != r.sha256:
            raise IntegrityError(
                f"{where(shard.key, index, pid, rid)}: its {hi - lo} tokens do not match the "
                "ledger's sha256; the tokens or the ledger changed: approval denied. Rebuild the ledger and approve again"
            )


class ShardCheck:
    """Fed one shard's bytes as the gate hashes them: cuts out each block, checks its sha256
    against the descriptor, decodes it and checks its records (`check_ranges`). Keeps the
    first refusal in `error` instead of raising, so the gate reports a changed shard first."""

    def __init__(self, storage: Storage, entry: ShardEntry, data_format: str, shard: CompiledShard):
        self.entry = entry
        self.shard = shard
        self.error: TrainVaultError | None = None
        self._reader: ShardReader | None = None
        try:
            # Bound by the manifest's descriptor sha256: the same bytes the gate hashes and keeps.
            self._reader = ShardReader(storage, entry, data_format, read_descriptor(storage, entry))
        except TrainVaultError as exc:
            self.error = exc
        self._cutter = BlockCutter(entry.uri, self._reader.blocks) if self._reader is not None else None
        self._records = 0  # records checked

    def feed(self, chunk: bytes) -> None:
        if self.error is not None or self._reader is None or self._cutter is None:
            return
        try:
            for k, data in self._cutter.feed(chunk):
                first = self._reader.blocks[k].first_record
                for i, record in enumerate(self._reader.decode(k, data)):
                    check_ranges(self.shard, first + i, record)
                    self._records += 1
        except TrainVaultError as exc:
            self.error = exc

    def close(self) -> None:
        if self.error is not None or self._reader is None or self._cutter is None:
            return
        if not self._cutter.done:
            self.error = IntegrityError(
                f"{self.entry.uri}: the object ended before block {self._cutter.next}; it is truncated: approval denied"
            )
        elif self._records != len(self.shard.records):
            self.error = CustodyError(
                f"shard {self.shard.key} holds {self._records} records, its ledger describes {len(self.shard.records)}; "
                "the ledger does not describe this shard: rebuild it"
            )


class LedgerRefusal(Exception):
    """Carries a ledger's refusal (`error`) past the gate's `ApprovalError` wrapping: it keeps
    its own class and names range, record and shard."""

    def __init__(self, error: TrainVaultError):
        super().__init__(str(error))
        self.error = error


class LedgerChecks:
    """The gate's checks of every component ledger the request binds, for the approved `manifest`
    (shard URIs resolved). Construction checks the ledgers; `finish` what the shards held.
    Both raise `LedgerRefusal`."""

    def __init__(self, storage: Storage, bindings: Mapping[str, Any], manifest: DataManifest, manifest_sha256: str):
        self.storage = storage
        self.manifest = manifest
        try:
            self.ledgers: dict[str, CheckedLedger] = {
                split: open_ledger(storage, bindings, manifest_sha256, split, s.shards)
                for split, s in manifest.splits.items()
                if ledger_sidecar_name(split) in bindings
            }
        except (IntegrityError, ManifestError) as exc:
            raise LedgerRefusal(exc) from None
        self._checks: list[ShardCheck] = []

    def consumers(self) -> dict[str, Callable[[], ShardCheck]]:
        """A `ShardCheck` factory for each shard a ledger covers, for `hash_objects`."""
        out: dict[str, Callable[[], ShardCheck]] = {}
        for split, checked in self.ledgers.items():
            for entry, shard in zip(self.manifest.splits[split].shards, checked.shards, strict=False):
                out[normalize_uri(entry.uri)] = self._factory(entry, shard)  # as the gate names the files it hashes
        return out

    def _factory(self, entry: ShardEntry, shard: CompiledShard) -> Callable[[], ShardCheck]:
        def make() -> ShardCheck:
            check = ShardCheck(self.storage, entry, self.manifest.data_format, shard)
            self._checks.append(check)  # list.append is atomic: hashing threads call this
            return check

        return make

    def finish(self) -> dict[str, CheckedLedger]:
        """The checked ledgers by split, once every covered shard was fed whole; else the first refusal in
        manifest order."""
        fed = {normalize_uri(c.entry.uri): c for c in self._checks}
        for split in self.ledgers:
            for entry in self.manifest.splits[split].shards:
                check = fed.get(normalize_uri(entry.uri))
                if check is None:
                    raise LedgerRefusal(
                        IntegrityError(f"{entry.uri}: the gate did not read the shard; its ranges are unchecked")
                    )
                if check.error is not None:
                    raise LedgerRefusal(check.error)
        return self.ledgers


__all__ = ["LedgerChecks", "LedgerRefusal", "ShardCheck", "check_ranges"]
