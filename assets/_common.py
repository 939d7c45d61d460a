"""Helpers the asset modules share: upstream metadata, metadata tables, names."""


from typing import Any

import dagster as dg

GROUP = "trainvault"


def upstream(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext, key: str) -> dict[str, Any]:
    """The metadata of an upstream asset's latest materialization (uri, sha256, version, ...).

    Digests recorded when a document was written are what the next stage binds; the
    library re-reads and re-hashes the bytes, so a document changed since fails there.
    """
    event = context.instance.get_latest_materialization_event(dg.AssetKey(key))
    if event is None or event.asset_materialization is None:
        raise dg.Failure(f"{key} has not been materialized yet: materialize it first (the `lifecycle` job runs every stage)")
    return {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()}


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
