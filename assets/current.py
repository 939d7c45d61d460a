"""Which approval of a dataset is current, said on approved_dataset's own page when a run approves nothing.

A blocked run (the blocking check `within_contract` fails, or the gate refuses) leaves
approved_dataset **Failed** in the UI, beside the metadata of its last materialization: an earlier
run's approval, made under that run's policy. The step that blocks logs an observation of
approved_dataset naming the approval that stays current (its sha256, URI, version and run) or
saying that none is; the UI lists it among the asset's events, beside the failure.

The current approval is the asset's latest materialization in the instance, which is what the UI
shows as current; it is read for people only (nothing is handed on from it).
"""

import dagster as dg

from assets._common import Metadata, key
from resources.dataset import DatasetSpec

APPROVAL = "approved_dataset"
STATUS = "approval status"
CURRENT_SHA256 = "current approval sha256"


def current_approval(instance: dg.DagsterInstance, asset_key: dg.AssetKey) -> Metadata:
    """The approval the UI shows as current for `asset_key`: its digest, URI, version and run, or none."""
    event = instance.get_latest_materialization_event(asset_key)
    materialization = event.asset_materialization if event is not None else None
    if event is None or materialization is None:
        return {"current approval": "none: this dataset has no approval, and a trainer has nothing to open"}
    meta = {name: value.value for name, value in materialization.metadata.items()}
    sha256, uri, version = str(meta.get("sha256", "")), str(meta.get("uri", "")), str(meta.get("version", ""))
    return {
        "current approval": f"{sha256} (version {version}, run {event.run_id}) stays current, "
        "made under that run's approval policy",
        CURRENT_SHA256: sha256,
        "current approval uri": uri,
        "current approval version": version,
        "current approval run": event.run_id,
    }


def observe_blocked(context: dg.OpExecutionContext, spec: DatasetSpec, why: str) -> None:
    """Log on approved_dataset that this run approves nothing (`why`) and which approval stays current."""
    asset_key = key(spec, APPROVAL)
    current = current_approval(context.instance, asset_key)
    context.log_event(
        dg.AssetObservation(
            asset_key=asset_key,
            description=f"run {context.run_id} approved nothing: {why}; {current['current approval']}",
            metadata={STATUS: f"blocked in run {context.run_id}: {why}", **current},
        )
    )
