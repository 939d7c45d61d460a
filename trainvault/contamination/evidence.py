"""ngram-exact-v3's evidence rule: which matched n-grams count, and how many make an item contaminated.

An n-gram is *low-information* when it says nothing about where it came from: at least
`max_trivial_fraction` of its tokens are digit runs or single characters (tables of codes,
escapes, bit arrays), or fewer than `min_informative_tokens` of its distinct tokens are
neither those nor common tokens (Python keywords, builtins and common method names; number,
month and day names): a ``for i in range(len(l))`` loop, a ``1 one 2 two ...`` table. The
test reads the n-gram's own normalised tokens and nothing else, so it is the same on one
shard or a million, in any scan order, and on any sample a re-scan draws.

A low-information match is found, verified and reported like any other; only the verdict
leaves it out (an item with no other match is listed as *uncounted*, with its reason).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field, field_validator

from trainvault.documents import StrictModel

COMMON_TOKENS_ID: Final = "python-common-v1"

# Written out, not read from `keyword` and `builtins`: the list is part of the method, so
# it must not change with the interpreter that runs the scan.
_KEYWORDS = (
    "false none true and as assert async await break class continue def del elif else except finally for from "
    "global if import in is lambda nonlocal not or pass raise return try while with yield match case self cls"
)
_BUILTINS = (
    "abs all any ascii bin bool breakpoint bytearray bytes callable chr classmethod compile complex delattr dict "
    "dir divmod enumerate eval exec filter float format frozenset getattr globals hasattr hash help hex id input "
    "int isinstance issubclass iter len list locals map max memoryview min next object oct open ord pow print "
    "property range repr reversed round set setattr slice sorted staticmethod str sum super tuple type vars zip "
    "append extend insert pop remove index count keys values items get join split strip lower upper replace "
    "startswith endswith sort copy update"
)
_ENUMERATIONS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million "
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec "
    "monday tuesday wednesday thursday friday saturday sunday mon tue wed thu fri sat sun "
    "0x 0b 0o ff 00"
)
#: Tokens (normalised: casefolded) that carry no sign of where a text came from.
COMMON_TOKENS: Final = frozenset(t.encode() for t in f"{_KEYWORDS} {_BUILTINS} {_ENUMERATIONS}".split())

LowInformationReason = Literal["low-information"]
LOW_INFORMATION: Final = "low-information"


class EvidenceRule(StrictModel):
    """ngram-exact-v3's parameters (bound in the contract and copied into the report)."""

    #: A gram is low-information when at least this fraction of its tokens are digit runs or
    #: single characters.
    max_trivial_fraction: list[int] = Field(default_factory=lambda: [1, 2], min_length=2, max_length=2)
    #: ... or when fewer of its distinct tokens than this are informative (not trivial, not common).
    min_informative_tokens: int = Field(default=2, ge=0, le=64)
    common_tokens: Literal["python-common-v1"] = COMMON_TOKENS_ID
    #: An item is contaminated when at least this many of its distinct informative grams were
    #: matched (or all of them, for an item with fewer).
    min_counted_ngrams: int = Field(default=1, ge=1, le=100_000)

    @field_validator("max_trivial_fraction")
    @classmethod
    def _fraction(cls, value: list[int]) -> list[int]:
        n, d = value
        if not 0 < n <= d:
            raise ValueError(f"evidence.max_trivial_fraction must be [n, d] with 0 < n <= d, got {list(value)}")
        return value

    def is_low_information(self, gram: tuple[bytes, ...]) -> bool:
        """Whether `gram` (normalised tokens) is left out of the verdict."""
        trivial = sum(1 for t in gram if _trivial(t))
        n, d = self.max_trivial_fraction
        if trivial * d >= n * len(gram):
            return True
        informative = {t for t in gram if not _trivial(t) and t not in COMMON_TOKENS}
        return len(informative) < self.min_informative_tokens

    def counts(self, counted_ngrams: int, informative_ngrams: int) -> bool:
        """Whether an item with `counted_ngrams` of its `informative_ngrams` matched is contaminated."""
        return counted_ngrams >= 1 and counted_ngrams >= min(self.min_counted_ngrams, informative_ngrams)


def _trivial(token: bytes) -> bool:
    """A digit run or a single character (a normalised token is never empty)."""
    return token.isdigit() or len(token.decode("utf-8")) == 1


__all__ = ["COMMON_TOKENS", "COMMON_TOKENS_ID", "LOW_INFORMATION", "EvidenceRule", "LowInformationReason"]
