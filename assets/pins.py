"""producer_pins: the package versions and code revision that produce the data.

The dataset's version is a digest of the dataset spec's data fields and these pins;
the hand-off this asset returns carries that version, so every later stage of the same
run writes into the same `<root>/<dataset>/<version>/` folder, and a new trainvault,
codec or generator revision builds a new version instead of overwriting.
"""

import dagster as dg

from assets._common import BUILD, asset_args, object_metadata, table
from resources.dataset import DatasetSpec
from resources.handoff import Handoff
from resources.storage import StorageResource
from trainvault.approval import write_producer_pins

DESCRIPTION = (
    "Package versions (trainvault, codecs) and the generator's code revision; "
    "their digest and the spec decide the dataset version (its folder, the version layout)."
)


def build_producer_pins(spec: DatasetSpec) -> dg.AssetsDefinition:
    @dg.asset(**asset_args(spec, "producer_pins", BUILD, DESCRIPTION, "python"))
    def producer_pins(context: dg.AssetExecutionContext, store: StorageResource) -> dg.Output[Handoff]:
        pins = spec.producer_pins()
        layout = spec.layout(pins.document_sha256())
        bound = write_producer_pins(store.vault(), layout.producer_pins_uri, pins)
        return dg.Output(
            Handoff.of(layout, "producer_pins", bound.uri, bound.sha256),
            metadata={
                **object_metadata(bound.uri, bound.sha256, layout.version),
                "version folder": layout.base,
                "packages": table([p.model_dump() for p in pins.packages], [("name", "string"), ("version", "string")]),
                "code_revision": pins.code_revision or "",
                "python": pins.python,
            },
            data_version=dg.DataVersion(bound.sha256),
        )

    return producer_pins
