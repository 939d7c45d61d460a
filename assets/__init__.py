"""Dagster asset definitions, one module per lifecycle stage.

Each asset is a thin call into the `trainvault` library, which never imports Dagster:

    producer_pins -> dataset_shards (one partition per shard) -> data_manifest -> training_scan
    evaluation_release ---------------------------------------------------------------+
    contamination_report (blocking check: within_contract) -> approved_dataset (check: approval_opens)

`dataset_profile` (metrics and schema validation) gets its own module when its library
side lands; see `assets/profile.py`.
"""

import warnings as _warnings

# `backfill_policy` (Beta in Dagster 1.13) is what lets one run, and the CLI, cover a range of shards.
_warnings.filterwarnings("ignore", message=r"Parameter `backfill_policy`", module=r"dagster\..*")
_warnings.filterwarnings("ignore", message=r".*backfill_policy.*is currently in beta")
