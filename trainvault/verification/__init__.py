"""The lifecycle's verification pass: each shard read once for its hash check, contamination
scan, profile and field survey, and the per-shard results stored by content for reuse."""

from trainvault.verification.fused import (
    VerifiedShard,
    profile_from_surveys,
    shard_field_surveys,
    stored_survey,
    stored_verification,
    verify_shard,
)
from trainvault.verification.results import ShardSurvey

__all__ = [
    "ShardSurvey",
    "VerifiedShard",
    "profile_from_surveys",
    "shard_field_surveys",
    "stored_survey",
    "stored_verification",
    "verify_shard",
]
