"""What the asset modules share: keys, the arguments every asset takes, metadata tables, links."""

from typing import Any

import dagster as dg

from resources.dataset import DatasetSpec

#: Asset groups, one per stage of the lifecycle.
BUILD, EVALUATE, APPROVE = "build", "evaluate", "approve"
#: Bumped when an asset's logic changes (the UI marks downstream assets stale).
CODE_VERSION = "2"


def key(spec: DatasetSpec, name: str) -> dg.AssetKey:
    """``<dataset>/<name>``: every asset key is prefixed by its dataset."""
    return dg.AssetKey([spec.name, name])


def handoff_io(spec: DatasetSpec) -> str:
    """The resource key of the dataset's hand-off IO manager."""
    return f"handoffs_{spec.name}"


def storage_kind(spec: DatasetSpec) -> str:
    return "s3" if spec.root_uri.startswith("s3://") else "file"


def asset_args(spec: DatasetSpec, name: str, group: str, description: str, *kinds: str) -> dict[str, Any]:
    """The arguments every lifecycle asset of `spec` is declared with."""
    return dict(
        key=key(spec, name),
        group_name=group,
        description=description,
        kinds={storage_kind(spec), *kinds},
        owners=list(spec.owners),
        tags=dict(spec.tags),
        code_version=CODE_VERSION,
        io_manager_key=handoff_io(spec),
        backfill_policy=dg.BackfillPolicy.single_run(),
    )


def ins(spec: DatasetSpec, *names: str) -> dict[str, dg.AssetIn]:
    """Hand-off inputs by upstream asset name (parameters named like the assets)."""
    return {name: dg.AssetIn(key=key(spec, name)) for name in names}


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> dg.TableMetadataValue:
    """A UI table: columns as (name, type) with type one of string, int, bool."""
    return dg.MetadataValue.table(
        records=[dg.TableRecord({name: row[name] for name, _ in columns}) for row in rows],
        schema=dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in columns]),
    )


def link(uri: str) -> dg.MetadataValue:
    """A clickable link for s3:// and file:// URIs, a path for local files."""
    if uri.startswith("file://"):
        return dg.MetadataValue.path(uri[len("file://") :])
    return dg.MetadataValue.url(uri) if "://" in uri else dg.MetadataValue.path(uri)


def object_metadata(uri: str, sha256: str, version: str) -> dict[str, Any]:
    """Where an object is, for people: its URI (``dagster/uri``), a link, its digest and version."""
    return {"version": version, "uri": uri, "dagster/uri": uri, "open": link(uri), "sha256": sha256}
