"""The demo's curriculum dataset as a spec, for tests and benchmarks: the `demo_curriculum`
entry of pipelines/datasets.yaml with its shape and place given as arguments.

The environment settings the YAML reads (``TRAINVAULT_DEMO_ROOT``, ``..._SHARDS``,
``..._EVAL_SHARDS``, ``..._RECORDS``, ``TRAINVAULT_SIGNING_KEY_PATH``,
``TRAINVAULT_TRUSTED_KEY``, ``TRAINVAULT_SCANNER_KEY_PATH``, ``TRAINVAULT_TRUSTED_SCANNER_KEY``,
``TRAINVAULT_DEMO_EXCLUSIONS``) apply here too unless an argument overrides them.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.catalog import load_datasets
from resources.dataset import DatasetSpec, SplitSpec

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "pipelines" / "datasets.yaml"
#: The demo's approver key pair: ``approver.key`` (private, 0600) and ``approver.pub``.
DEMO_KEYS = REPO / ".demo" / "keys" / "approver"
#: The demo's scanner key pair (signs scan manifests and contamination reports).
DEMO_SCANNER_KEYS = REPO / ".demo" / "keys" / "scanner"
CLEAN_GENERATOR = "pipelines.examples.curriculum:generate_records"
PLANTED_GENERATOR = "pipelines.examples.plant:planted_records"


def key_fields(approver: str | Path, scanner: str | Path | None = None) -> dict[str, object]:
    """Spec fields for the key pairs at these prefixes (``<prefix>.key``, ``<prefix>.pub``); the
    scanner signs with the approver's key when `scanner` is None."""
    scanner = scanner or approver
    return {
        "signing_key_path": f"{approver}.key",
        "trusted_keys_path": f"{approver}.pub",
        "scanner_key_path": f"{scanner}.key",
        "trusted_scanner_keys": [f"{scanner}.pub"],
    }


def demo_spec(name: str, **overrides: object) -> DatasetSpec:
    """The catalog's entry `name`, with fields replaced by `overrides`."""
    (spec,) = [s for s in load_datasets(CATALOG) if s.name == name]
    fields = {k: getattr(spec, k) for k in DatasetSpec.model_fields}
    fields.update(overrides)
    return DatasetSpec(**fields)


def example_spec(
    root: str | None = None,
    *,
    shards_per_stage: int | None = None,
    eval_shards: int | None = None,
    records: int | None = None,
    plant: bool = False,
    **overrides: object,
) -> DatasetSpec:
    """`demo_curriculum` with `shards_per_stage` train shards per stage and `eval_shards` valid and test shards."""
    base = demo_spec("demo_curriculum")
    fields: dict[str, object] = {}
    if root is not None:
        fields["root_uri"] = root
    if records is not None:
        fields["records_per_shard"] = records
    if plant:
        fields["generator"] = PLANTED_GENERATOR
    if shards_per_stage is not None or eval_shards is not None:
        counts = {"train": shards_per_stage, "valid": eval_shards, "test": eval_shards}
        fields["splits"] = [
            SplitSpec(
                name=s.name,
                stages=list(s.stages),
                shard_ids=[str(i) for i in range(n)] if (n := counts.get(s.name)) else list(s.shard_ids),
            )
            for s in base.splits
        ]
    fields.update(overrides)
    return demo_spec("demo_curriculum", **fields)
