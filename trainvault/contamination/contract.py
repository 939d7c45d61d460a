"""The verifier contract (verifier-contract-v1.json): what a contamination scan means.

The contract fixes the method, the normalisation, the n-gram size, which record fields
are scanned, and the policy that turns counts into pass or fail. Its SHA-256 is bound
into every per-shard result and into the report, so a scan cannot be re-judged under
looser rules without the change showing.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from trainvault.contamination.evidence import EvidenceRule
from trainvault.contamination.normalize import NORMALIZATION_ID, NORMALIZATION_V1, NormalizationSpec
from trainvault.documents import Document, StrictModel

METHOD_V1: Final = "ngram-exact-v1"
METHOD_V2: Final = "ngram-exact-v2"
#: ngram-exact-v2's matching with an evidence rule (`trainvault.contamination.evidence`): the default.
METHOD_V3: Final = "ngram-exact-v3"
METHOD_ID: Final = METHOD_V3
#: The normalisation each method id is bound to: a contract cannot pair them otherwise.
METHOD_NORMALIZATION = {METHOD_V1: NORMALIZATION_V1, METHOD_V2: NORMALIZATION_ID, METHOD_V3: NORMALIZATION_ID}
HASH_ID: Final = "blake2b64+poly64"

#: A non-negative fraction as ``[numerator, denominator]`` integers: no floats anywhere.
Ratio = Annotated[list[int], Field(min_length=2, max_length=2)]


def check_ratio(value: list[int], what: str) -> list[int]:
    """Validate a fraction ``[n, d]`` with ``0 <= n <= d`` and ``d >= 1``."""
    n, d = value
    if d < 1 or n < 0 or n > d:
        raise ValueError(
            f"{what} must be [numerator, denominator] with 0 <= numerator <= denominator and "
            f"denominator >= 1, got {list(value)}"
        )
    return value


def ratio_at_most(count: int, total: int, limit: list[int]) -> bool:
    """``count / total <= limit`` in exact integer arithmetic (an empty total passes)."""
    n, d = limit
    return count * d <= n * total


class BenchmarkLimits(StrictModel):
    """When a benchmark passes: contaminated and uncheckable fractions at most these limits."""

    #: Per benchmark name, with ``"*"`` for every benchmark not named. Default: none contaminated.
    max_contaminated_fraction: dict[str, Ratio] = Field(default_factory=lambda: {"*": [0, 1]})
    #: Uncheckable items (too short, or only template n-grams) over all items.
    max_uncheckable_fraction: Ratio = Field(default_factory=lambda: [1, 20])
    #: Count the matches an evidence rule leaves out (ngram-exact-v3's uncounted items) as
    #: contamination after all. Written only when true, so earlier policies keep their bytes.
    count_uncounted: bool = False

    @model_serializer(mode="wrap")
    def _omit_default_count(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if out.get("count_uncounted") is False:
            out.pop("count_uncounted")
        return out

    @field_validator("max_contaminated_fraction")
    @classmethod
    def _contaminated(cls, value: dict[str, list[int]]) -> dict[str, list[int]]:
        if "*" not in value:
            raise ValueError("max_contaminated_fraction needs a '*' entry (the limit for benchmarks not named)")
        for name, r in value.items():
            check_ratio(r, f"max_contaminated_fraction[{name!r}]")
        return value

    @field_validator("max_uncheckable_fraction")
    @classmethod
    def _uncheckable(cls, value: list[int]) -> list[int]:
        return check_ratio(value, "max_uncheckable_fraction")

    def contaminated_limit(self, benchmark: str) -> list[int]:
        return self.max_contaminated_fraction.get(benchmark, self.max_contaminated_fraction["*"])

    def benchmark_passes(
        self, benchmark: str, n_items: int, n_checkable: int, n_uncheckable: int, n_contaminated: int
    ) -> bool:
        """Pass for one benchmark, from its counts alone (what a gate recomputes)."""
        return (
            n_items >= 1
            and ratio_at_most(n_contaminated, n_checkable, self.contaminated_limit(benchmark))
            and ratio_at_most(n_uncheckable, n_items, self.max_uncheckable_fraction)
        )


class MethodSpec(StrictModel):
    """The matching method and its parameters, copied verbatim into the report.

    ``ngram-exact-v3`` (the default) and ``ngram-exact-v2`` normalise with tvnorm-v2,
    ``ngram-exact-v1`` with tvnorm-v1; a spec without `normalization` gets its method's.
    v3 alone has an `evidence` rule (a v3 spec without one gets the default rule).
    """

    id: Literal["ngram-exact-v1", "ngram-exact-v2", "ngram-exact-v3"] = METHOD_ID
    #: n-gram size in tokens.
    n: int = Field(default=13, ge=2, le=64)
    #: Items with fewer tokens are uncheckable; items with at least this many but fewer than
    #: `n` are matched whole.
    min_item_tokens: int = Field(default=8, ge=1, le=64)
    #: An n-gram found in more than this many items of one benchmark (a template) is excluded.
    max_item_df: int = Field(default=10, ge=1)
    normalization: NormalizationSpec = Field(default_factory=NormalizationSpec)
    unit: Literal["word"] = "word"
    tokenizer_sha256: None = None
    hash: Literal["blake2b64+poly64"] = HASH_ID
    exhaustive: Literal[True] = True
    #: Which matches count toward a verdict (ngram-exact-v3 only; omitted otherwise).
    evidence: EvidenceRule | None = None

    @model_validator(mode="before")
    @classmethod
    def _method_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        method = data.get("id", METHOD_ID)
        if "normalization" not in data and method in METHOD_NORMALIZATION:
            data = {**data, "normalization": {"id": METHOD_NORMALIZATION[method]}}
        if "evidence" not in data and method == METHOD_V3:
            data = {**data, "evidence": EvidenceRule()}
        return data

    @model_serializer(mode="wrap")
    def _omit_missing_evidence(self, handler: Any) -> dict[str, Any]:
        # v1 and v2 specs keep the bytes (and contract digests) they were written with.
        out: dict[str, Any] = handler(self)
        if out.get("evidence") is None:
            out.pop("evidence", None)
        return out

    @model_validator(mode="after")
    def _sizes(self) -> MethodSpec:
        expected = METHOD_NORMALIZATION[self.id]
        if self.normalization.id != expected:
            raise ValueError(
                f"method {self.id} normalises with {expected}, not {self.normalization.id}: "
                f"set normalization.id to {expected!r} or use the method that goes with it"
            )
        if (self.evidence is None) != (self.id != METHOD_V3):
            raise ValueError(
                f"method {self.id} {'needs' if self.id == METHOD_V3 else 'has no'} evidence rule: "
                f"{'give one or leave it out for the default' if self.id == METHOD_V3 else 'use ngram-exact-v3 for one'}"
            )
        if self.min_item_tokens > self.n:
            raise ValueError(f"min_item_tokens ({self.min_item_tokens}) must not exceed n ({self.n})")
        return self


class VerifierContract(Document):
    """verifier-contract-v1: method, scanned fields, hit cap and pass policy."""

    KIND = "trainvault.verifier-contract"

    format: Literal["trainvault.verifier-contract"] = "trainvault.verifier-contract"
    version: Literal[1] = 1
    method: MethodSpec = Field(default_factory=MethodSpec)
    #: Record fields scanned, each on its own (a match never spans two fields or records).
    #: A record without one of them, or with a non-string value, fails the scan.
    fields: list[str] = Field(default_factory=lambda: ["text"])
    #: Record field copied into hit coordinates when present (a string or integer).
    record_id_field: str | None = "id"
    #: Training coordinates kept per contaminated item; `hits_total` stays exact.
    max_hits_per_item: int = Field(default=100, ge=1, le=100_000)
    policy: BenchmarkLimits = Field(default_factory=BenchmarkLimits)

    @field_validator("fields")
    @classmethod
    def _fields(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("fields must name at least one record field to scan")
        if len(set(value)) != len(value) or any(not f for f in value):
            raise ValueError("fields must be distinct, non-empty field names")
        return value


DEFAULT_CONTRACT = VerifierContract()
#: The ngram-exact-v1 / tvnorm-v1 contract with every other setting at its default.
V1_CONTRACT = VerifierContract(method=MethodSpec(id=METHOD_V1))
#: The ngram-exact-v2 / tvnorm-v2 contract (the default before issue 41) with every other setting at its default.
V2_CONTRACT = VerifierContract(method=MethodSpec(id=METHOD_V2))

__all__ = [
    "DEFAULT_CONTRACT",
    "HASH_ID",
    "METHOD_ID",
    "METHOD_NORMALIZATION",
    "METHOD_V1",
    "METHOD_V2",
    "METHOD_V3",
    "V1_CONTRACT",
    "V2_CONTRACT",
    "BenchmarkLimits",
    "MethodSpec",
    "Ratio",
    "VerifierContract",
    "check_ratio",
    "ratio_at_most",
]
