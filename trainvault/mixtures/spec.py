"""A mixture: weighted components of one split, each a curriculum stage (or the whole split).

A component declares how it is drawn (`replacement`) and what happens when one pass over
it is used up (`run_out`): ``repeat`` starts its next pass (the report counts the
repeated records), ``drop`` removes it and the other weights are renormalised. Weights
are positive ints or floats, read as the decimal they print as (``0.3`` is 3/10), so the
schedule is exact rational arithmetic on every machine.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainvault.canonical import canonical_json, sha256_hex
from trainvault.errors import ConfigurationError

RUN_OUT_REPEAT = "repeat"
RUN_OUT_DROP = "drop"
_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


@dataclass(frozen=True)
class MixtureComponent:
    """One source of a mixture: `stage` of the mixture's split (None: every shard of it)."""

    name: str
    weight: int | float
    stage: str | None = None
    replacement: bool = False
    run_out: str = RUN_OUT_REPEAT

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigurationError(f"mixture component name {self.name!r} must match [A-Za-z0-9._-]{{1,128}}")
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0:
            raise ConfigurationError(
                f"mixture component {self.name!r}: weight must be a finite number > 0, got {w!r} "
                "(leave a component out of a revision to remove it)"
            )
        if self.stage is not None and not isinstance(self.stage, str):
            raise ConfigurationError(f"mixture component {self.name!r}: stage must be a stage name or None")
        if not isinstance(self.replacement, bool):
            raise ConfigurationError(f"mixture component {self.name!r}: replacement must be True or False")
        if self.run_out not in (RUN_OUT_REPEAT, RUN_OUT_DROP):
            raise ConfigurationError(
                f"mixture component {self.name!r}: run_out must be {RUN_OUT_REPEAT!r} or {RUN_OUT_DROP!r}, "
                f"got {self.run_out!r}"
            )

    @property
    def exact_weight(self) -> Fraction:
        return Fraction(str(self.weight))

    def source(self) -> dict[str, Any]:
        """What fixes the records this component deals (a name keeps it for the whole run)."""
        return {"stage": self.stage, "replacement": self.replacement, "run_out": self.run_out}

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "weight": self.weight, **self.source()}


@dataclass(frozen=True)
class Mixture:
    """Components of `split` and their weights; the target share of each is weight / sum."""

    split: str
    components: tuple[MixtureComponent, ...]

    def __init__(self, split: str, components: Sequence[MixtureComponent]):
        if not isinstance(split, str):
            raise ConfigurationError(f"a mixture's split is a split name, got {split!r}")
        if isinstance(components, (str, bytes)) or not isinstance(components, Sequence) or not components:
            raise ConfigurationError("a mixture needs a non-empty list of MixtureComponent")
        if not all(isinstance(c, MixtureComponent) for c in components):
            raise ConfigurationError(f"mixture components must be MixtureComponent, got {list(components)!r}")
        names = [c.name for c in components]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"mixture over split {split!r} names a component twice: {names}")
        object.__setattr__(self, "split", split)
        object.__setattr__(self, "components", tuple(components))

    def shares(self) -> dict[str, Fraction]:
        """Target share of each component (exact)."""
        total = sum(c.exact_weight for c in self.components)
        return {c.name: c.exact_weight / total for c in self.components}

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "components": [c.to_dict() for c in self.components]}

    @property
    def sha256(self) -> str:
        return sha256_hex(canonical_json(self.to_dict()))

    @classmethod
    def from_dict(cls, data: Any) -> Mixture:
        """Parse `to_dict()` output; `ConfigurationError` names what is wrong."""
        if not isinstance(data, dict) or set(data) != {"split", "components"}:
            raise ConfigurationError(f"a mixture document has exactly 'split' and 'components', got {data!r}")
        comps = data["components"]
        if not isinstance(comps, list):
            raise ConfigurationError(f"mixture 'components' must be a list, got {comps!r}")
        fields = {"name", "weight", "stage", "replacement", "run_out"}
        parsed = []
        for c in comps:
            if not isinstance(c, dict) or set(c) != fields:
                raise ConfigurationError(f"a mixture component has exactly {sorted(fields)}, got {c!r}")
            parsed.append(MixtureComponent(**c))
        return cls(data["split"], parsed)
