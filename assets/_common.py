"""What the asset modules share: keys, the arguments every asset takes, metadata tables, links."""

import threading
from collections.abc import Callable
from typing import Any, Generic, NotRequired, TypeAlias, TypedDict, TypeVar

import dagster as dg

from resources.dataset import DatasetSpec

#: The lifecycle's stages, each asset's tag `STAGE_TAG` (the asset group is the dataset: one unit per
#: dataset in the global lineage, where groups shared across datasets showed identical labels side by side).
BUILD, EVALUATE, APPROVE = "build", "evaluate", "approve"
STAGE_TAG = "trainvault/stage"
#: Bumped when an asset's logic changes (the UI marks downstream assets stale).
CODE_VERSION = "2"

#: A metadata entry as an asset records it: a `dg.MetadataValue` or a plain value Dagster wraps.
MetadataEntry: TypeAlias = dg.MetadataValue | str | int | float | bool | None
Metadata: TypeAlias = dict[str, MetadataEntry]
T = TypeVar("T")


class Once(Generic[T]):
    """A value made on first use and only once, however many of a step's threads ask for it."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make, self._lock = make, threading.Lock()
        self._made: list[T] = []

    def get(self) -> T:
        with self._lock:
            if not self._made:
                self._made.append(self._make())
            return self._made[0]


def key(spec: DatasetSpec, name: str) -> dg.AssetKey:
    """``<dataset>/<name>``: every asset key is prefixed by its dataset."""
    return dg.AssetKey([spec.name, name])


def handoff_io(spec: DatasetSpec) -> str:
    """The resource key of the dataset's hand-off IO manager."""
    return f"handoffs_{spec.name}"


def storage_kind(spec: DatasetSpec) -> str:
    return "s3" if spec.root_uri.startswith("s3://") else "file"


class AssetArgs(TypedDict):
    """The keyword arguments of `dg.asset` every lifecycle asset shares (typed, so `**` keeps its overload)."""

    key: dg.AssetKey
    group_name: str
    description: str
    kinds: set[str]
    owners: list[str]
    tags: dict[str, str]
    code_version: str
    io_manager_key: NotRequired[str]
    backfill_policy: dg.BackfillPolicy


def asset_args(spec: DatasetSpec, name: str, stage: str, description: str, *kinds: str) -> AssetArgs:
    """The arguments every lifecycle asset of `spec` is declared with: in the group named like the dataset,
    tagged with its `stage` (`STAGE_TAG`; catalog tag keys hold no `/`, so none collides with it)."""
    return AssetArgs(
        key=key(spec, name),
        group_name=spec.name,
        description=description,
        kinds={storage_kind(spec), *kinds},
        owners=list(spec.owners),
        tags={**spec.tags, STAGE_TAG: stage},
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


def object_metadata(uri: str, sha256: str, version: str) -> Metadata:
    """Where an object is, for people: its URI (``dagster/uri``), a link, its digest and version."""
    return {"version": version, "uri": uri, "dagster/uri": uri, "open": link(uri), "sha256": sha256}
