"""Typed hand-offs between assets: small JSON references stored beside the publication.

An asset returns a `Handoff` (what it wrote, by uri and sha256, and the publication
version it belongs to); `HandoffIOManager` writes it create-only as
``<root>/<dataset>/<version>/handoffs/<asset>-<digest>.json`` and records that object on
the materialization. A downstream step of the same run reads the reference its own
run's upstream step recorded (the run's event log names the object and its digest), so
two overlapping runs never cross: nothing is looked up as "the latest". Named by
content, an unchanged rebuild writes the same object again, which is a no-op.

A step whose upstream did not run in its run (a subset selection) reads the one
hand-off of that asset in the current spec's version folder, and refuses when there is
none or more than one.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from resources.dataset import DatasetSpec, VersionLayout
from resources.storage import StorageResource
from trainvault import ConfigurationError, IntegrityError, ObjectRef
from trainvault.canonical import sha256_hex
from trainvault.documents import Document

#: Materialization records read per request when looking up a run's materializations of one asset.
PAGE = 1000
HANDOFF_URI = "handoff"
HANDOFF_SHA256 = "handoff sha256"


class Handoff(Document):
    """dagster-handoff-v1: what one asset of one publication version hands to the next."""

    KIND = "trainvault.dagster-handoff"

    format: Literal["trainvault.dagster-handoff"] = "trainvault.dagster-handoff"
    version: Literal[1] = 1
    dataset: str
    publication_version: str = Field(min_length=1)
    asset: str
    ref: ObjectRef
    #: Further objects the next stages bind (the verifier contract beside a release, sidecars).
    also: dict[str, ObjectRef] = Field(default_factory=dict)

    @classmethod
    def of(cls, layout: VersionLayout, asset: str, uri: str, sha256: str, **also: ObjectRef) -> Handoff:
        return cls(
            dataset=layout.dataset,
            publication_version=layout.version,
            asset=asset,
            ref=ObjectRef(uri=uri, sha256=sha256),
            also=also,
        )


class HandoffIOManager(dg.ConfigurableIOManager):
    """Stores and loads `Handoff` references for one dataset; never pickles, never "latest"."""

    store: StorageResource
    dataset: DatasetSpec

    def handle_output(self, context: dg.OutputContext, obj: Handoff) -> None:
        if not isinstance(obj, Handoff):
            raise ConfigurationError(
                f"{context.asset_key.to_user_string()}: returned {type(obj).__name__}, the hand-off IO manager "
                "stores only resources.handoff.Handoff: return one"
            )
        data = obj.to_json_bytes()
        digest = sha256_hex(data)
        uri = self.dataset.layout_at(obj.publication_version).handoff_uri(obj.asset, digest)
        self.store.vault().storage.put_create(uri, data)
        context.add_output_metadata({HANDOFF_URI: uri, HANDOFF_SHA256: digest})

    def load_input(self, context: dg.InputContext) -> Handoff:
        upstream = context.upstream_output
        if upstream is None or upstream.asset_key is None:
            raise ConfigurationError(f"{context.name}: a hand-off input must come from an asset")
        asset = upstream.asset_key.path[-1]
        run_id = upstream_run_id(upstream)
        found = run_handoff(context.instance, run_id, upstream.asset_key) if run_id else None
        if found is None:
            return self.only_handoff(asset)
        uri, sha256 = found
        data = self.store.vault().storage.get_document(uri)
        if sha256_hex(data) != sha256:
            raise IntegrityError(
                f"{uri}: the hand-off of {asset} was altered since run {run_id} wrote it; rerun the lifecycle"
            )
        return Handoff.from_json_bytes(data, source=uri)

    def only_handoff(self, asset: str) -> Handoff:
        """The one hand-off of `asset` in the current spec's version (upstream not in this run)."""
        layout = self.dataset.layout()
        storage = self.store.vault().storage
        prefix = layout.handoffs_dir + f"/{asset}-"
        found = [o.uri for o in storage.list(layout.handoffs_dir) if o.uri.startswith(prefix)]
        if len(found) != 1:
            what = "no hand-off" if not found else f"{len(found)} hand-offs"
            raise ConfigurationError(
                f"{self.dataset.name}/{asset}: {what} in {layout.handoffs_dir} for version {layout.version}; "
                f"materialize {asset} in the same run (launch lifecycle_{self.dataset.name})"
            )
        return Handoff.from_json_bytes(storage.get_document(found[0]), source=found[0])


def upstream_run_id(upstream: dg.OutputContext) -> str | None:
    """The run that produced the upstream output; None when the upstream is not part of this run."""
    try:
        return upstream.run_id
    except dg.DagsterInvariantViolationError:
        return None


def run_materializations(
    instance: dg.DagsterInstance, run_id: str, key: dg.AssetKey
) -> dict[str | None, dict[str, Any]]:
    """The metadata of `key`'s materializations in run `run_id`, by partition (None: unpartitioned).

    Read from `key`'s own records since the run was created, not from the run's whole event log:
    a run of 10,000 shard partitions logs 10,000 materializations of other assets, which every
    input load would otherwise read again."""
    run = instance.get_run_record_by_id(run_id)
    created = run.create_timestamp if run is not None else None
    # Run storage may keep a naive UTC datetime.
    # An hour's margin: events carry the clock of the process that wrote them.
    since = created.replace(tzinfo=created.tzinfo or UTC).timestamp() - 3600 if created else None
    out: dict[str | None, dict[str, Any]] = {}
    cursor = None
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, after_timestamp=since), limit=PAGE, cursor=cursor, ascending=True
        )
        for record in page.records:
            mat = record.asset_materialization
            if record.run_id == run_id and mat is not None:
                out[mat.partition] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
        if not page.has_more:
            return out
        cursor = page.cursor


def run_handoff(instance: dg.DagsterInstance, run_id: str, key: dg.AssetKey) -> tuple[str, str] | None:
    """(uri, sha256) of the hand-off `key`'s materialization in run `run_id` recorded, if any."""
    meta = run_materializations(instance, run_id, key).get(None, {})
    return (meta[HANDOFF_URI], meta[HANDOFF_SHA256]) if HANDOFF_URI in meta else None
