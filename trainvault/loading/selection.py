"""Which shards of a split a loader reads: the whole split, one stage, or a union of stages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainvault.canonical import canonical_json, sha256_hex
from trainvault.errors import SelectionError
from trainvault.publication.manifest import DataManifest, ShardEntry


@dataclass(frozen=True)
class Selection:
    """A split and its chosen stages (None: every shard), resolved to shards in read order."""

    split: str
    stages: tuple[str, ...] | None
    shards: tuple[ShardEntry, ...]

    @property
    def keys(self) -> list[str]:
        return [s.key for s in self.shards]

    @property
    def sha256(self) -> str:
        """Binds the resume state to exactly these shards of this split."""
        return sha256_hex(
            canonical_json(
                {"split": self.split, "stages": list(self.stages) if self.stages else None, "shards": self.keys}
            )
        )

    def describe(self) -> str:
        stages = ", ".join(self.stages) if self.stages else "all shards"
        return f"split {self.split!r} ({stages})"


def select(
    manifest: DataManifest,
    split: str,
    curriculum_stage: str | None = None,
    curriculum_stages: Sequence[str] | None = None,
) -> Selection:
    """Resolve a split and stage choice. A union reads each shard once, in the order the
    stages are listed (each stage in its curriculum order)."""
    if not isinstance(split, str):
        raise TypeError(f"split must be a split name (a str), got {type(split).__name__}")
    if split not in manifest.splits:
        raise SelectionError(
            f"split {split!r} is not in this manifest; published splits: {', '.join(sorted(manifest.splits)) or '(none)'}"
        )
    if curriculum_stage is not None and curriculum_stages is not None:
        raise SelectionError("pass curriculum_stage or curriculum_stages, not both")
    entries = manifest.splits[split]
    if curriculum_stage is None and curriculum_stages is None:
        return Selection(split, None, tuple(entries.shards))
    if curriculum_stage is not None:
        stages: list[str] = [curriculum_stage]
    else:
        if isinstance(curriculum_stages, str) or not curriculum_stages:
            raise SelectionError("curriculum_stages must be a non-empty list of stage names")
        if not isinstance(curriculum_stages, Sequence):
            raise TypeError(f"curriculum_stages must be a list of stage names, got {type(curriculum_stages).__name__}")
        stages = list(curriculum_stages)
    if not all(isinstance(s, str) for s in stages):
        raise TypeError(f"stage names are str, got {stages!r}")
    if len(set(stages)) != len(stages):
        raise SelectionError(f"curriculum_stages lists a stage twice: {stages}")
    known = sorted(entries.curricula)
    unknown = [s for s in stages if s not in entries.curricula]
    if unknown:
        raise SelectionError(
            f"curriculum stage(s) {', '.join(map(repr, unknown))} not in split {split!r}; "
            f"known stages: {', '.join(known) or '(none)'}"
        )
    seen: set[str] = set()
    shards: list[ShardEntry] = []
    for stage in stages:
        for key in entries.curricula[stage].shards:
            if key not in seen:
                seen.add(key)
                shards.append(entries.shard(key))
    return Selection(split, tuple(stages), tuple(shards))
