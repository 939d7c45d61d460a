"""producer_pins: the package versions and code revision that produce the data.

The publication's version is a digest of the dataset spec's data fields and these pins,
so every later stage computes the same `<root>/<dataset>/<version>/` folder, and a new
trainvault, codec or generator revision builds a new version instead of overwriting.
"""


import dagster as dg

from assets._common import GROUP, link, table
from resources.dataset import DatasetSpec
from resources.storage import ObjectStore
from trainvault.approval import write_producer_pins


@dg.asset(group_name=GROUP, kinds={"python"}, code_version="1", backfill_policy=dg.BackfillPolicy.single_run())
def producer_pins(context: dg.AssetExecutionContext, store: ObjectStore, dataset: DatasetSpec) -> dg.MaterializeResult:
    pins = dataset.producer_pins()
    pub = dataset.publication(pins.document_sha256())
    bound = write_producer_pins(store.vault(), pub.producer_pins_uri, pins)
    return dg.MaterializeResult(
        metadata={
            "version": pub.version,
            "publication": link(pub.base),
            "uri": bound.uri,
            "open": link(bound.uri),
            "sha256": bound.sha256,
            "packages": table([p.model_dump() for p in pins.packages], [("name", "string"), ("version", "string")]),
            "code_revision": pins.code_revision or "",
            "python": pins.python,
        },
        data_version=dg.DataVersion(bound.sha256),
    )
