"""Dagster asset builders, one module per lifecycle stage; each builds one dataset's asset.

Each asset is a thin call into the `trainvault` library, which never imports Dagster, and
hands the next stage a typed reference (`resources.handoff.Handoff`) through an IO manager:

    build:    producer_pins -> dataset_shards (one partition per shard) -> data_manifest
              -> training_scan, dataset_profile (check: task_data_valid)
    evaluate: evaluation_release -> contamination_scan (one partition per shard)
              -> contamination_report (blocking check: within_contract)
    approve:  approved_dataset (check: approval_opens)

Keys are prefixed by the dataset's name (`<dataset>/data_manifest`); pipelines/definitions.py
builds every dataset of the catalog.
"""

import warnings as _warnings

# `backfill_policy` (Beta in Dagster 1.13) is what lets one run, and the CLI, cover a range of shards.
_warnings.filterwarnings("ignore", message=r"Parameter `backfill_policy`", module=r"dagster\..*")
_warnings.filterwarnings("ignore", message=r".*backfill_policy.*is currently in beta")
# `Output(data_version=...)` is Beta too: the hand-off travels as the value, the digest as the data version.
_warnings.filterwarnings("ignore", message=r"Parameter `data_version`")
