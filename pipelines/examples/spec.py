"""The example dataset spec the code location serves, read from the environment.

``TRAINVAULT_DEMO_ROOT``   where publications live (default ``<repo>/.demo/store``; any s3:// URI works)
``TRAINVAULT_DEMO_SHARDS`` shards per train stage (easy, medium, hard; default 4)
``TRAINVAULT_DEMO_EVAL_SHARDS`` shards of valid and of test (default 1)
``TRAINVAULT_DEMO_RECORDS`` records per shard (default 200)
``TRAINVAULT_DEMO_PLANT``  1: plant evaluation items into train/hard/0 (the check fails)
``TRAINVAULT_SIGNING_KEY`` the approver's Ed25519 private key (PEM text or path; default .demo/keys/approver.key)
``TRAINVAULT_TRUSTED_KEY`` the public key that must have signed (default .demo/keys/approver.pub)
"""

from __future__ import annotations

import os
from pathlib import Path

from resources.dataset import CurriculumSpec, DatasetSpec, SplitSpec

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ROOT = REPO / ".demo" / "store"
#: The demo's approver key pair: ``approver.key`` (private, 0600) and ``approver.pub``.
DEMO_KEYS = REPO / ".demo" / "keys" / "approver"
CLEAN_GENERATOR = "pipelines.examples.curriculum:generate_records"
PLANTED_GENERATOR = "pipelines.examples.plant:planted_records"


def example_spec(
    root: str | None = None,
    *,
    shards_per_stage: int | None = None,
    eval_shards: int | None = None,
    records: int | None = None,
    plant: bool | None = None,
    **overrides: object,
) -> DatasetSpec:
    env = os.environ.get
    n = shards_per_stage or int(env("TRAINVAULT_DEMO_SHARDS", "4"))
    m = eval_shards or int(env("TRAINVAULT_DEMO_EVAL_SHARDS", "1"))
    if plant is None:
        plant = env("TRAINVAULT_DEMO_PLANT", "") not in ("", "0", "false", "no")
    fields: dict[str, object] = dict(
        name="curriculum",
        root_uri=root or env("TRAINVAULT_DEMO_ROOT") or str(DEFAULT_ROOT),
        splits=[
            SplitSpec(name="train", stages=["easy", "medium", "hard"], shard_ids=[str(i) for i in range(n)]),
            SplitSpec(name="valid", shard_ids=[str(i) for i in range(m)]),
            SplitSpec(name="test", shard_ids=[str(i) for i in range(m)]),
        ],
        curricula=[CurriculumSpec(split="train", name="easy-to-hard", stages=["easy", "medium", "hard"])],
        records_per_shard=records or int(env("TRAINVAULT_DEMO_RECORDS", "200")),
        generator=PLANTED_GENERATOR if plant else CLEAN_GENERATOR,
        # With $TRAINVAULT_SIGNING_KEY set (PEM text or a path), that key signs; else the demo's key file.
        signing_key_path=None if env("TRAINVAULT_SIGNING_KEY") else str(DEMO_KEYS) + ".key",
        trusted_keys_path=env("TRAINVAULT_TRUSTED_KEY") or str(DEMO_KEYS) + ".pub",
    )
    fields.update(overrides)
    return DatasetSpec(**fields)  # type: ignore[arg-type]
