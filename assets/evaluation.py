"""evaluation_release: the benchmarks a dataset is checked against, and the verifier contract.

Each benchmark's item file is published create-only and bound by SHA-256 in the release
document; the release folder is named by a digest of the item files, so a new version
of a benchmark is a new release, never an overwrite. The verifier contract (method,
normalisation, n-gram size, scanned fields, pass policy) is published by its digest too;
it travels in the hand-off beside the release.
"""

import dagster as dg

from assets._common import EVALUATE, asset_args, ins, link, object_metadata, table
from resources.dataset import DatasetSpec, load_callable
from resources.handoff import Handoff
from resources.storage import ObjectStore
from trainvault import ObjectRef
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.contamination import MethodSpec, VerifierContract, publish_release
from trainvault.publication import write_document

DESCRIPTION = (
    "The evaluation release (every benchmark's items, by digest) and the verifier contract "
    "(method, n-gram size, fields, pass policy) the training data is checked against."
)


def build_evaluation_release(spec: DatasetSpec) -> dg.AssetsDefinition:
    @dg.asset(**asset_args(spec, "evaluation_release", EVALUATE, DESCRIPTION, "python"), ins=ins(spec, "producer_pins"))
    def evaluation_release(
        context: dg.AssetExecutionContext, store: ObjectStore, producer_pins: Handoff
    ) -> dg.Output[Handoff]:
        vault = store.vault()
        pub = spec.publication_at(producer_pins.publication_version)
        benchmarks = [load_callable(source)() for source in spec.evaluation_sources]
        digest = sha256_hex(canonical_json([[b.name, sha256_hex(b.jsonl_bytes())] for b in benchmarks]))
        release = publish_release(vault.storage, spec.evaluation_root(digest), spec.evaluation_release_id, benchmarks)
        contract = VerifierContract(method=MethodSpec(n=spec.ngram_n), fields=list(spec.scan_fields))
        bound_contract = write_document(vault.storage, spec.contract_uri(contract.document_sha256()), contract)
        rows = [
            {
                "benchmark": e.name,
                "items": e.items.n_items,
                "fields": ", ".join(e.text_fields),
                "sha256": e.items.sha256,
                "source": ", ".join(f"{k}={v}" for k, v in sorted(e.source.items()) if k != "sha256"),
            }
            for e in release.document.benchmarks
        ]
        contract_ref = ObjectRef(uri=bound_contract.uri, sha256=bound_contract.sha256)
        return dg.Output(
            Handoff.of(pub, "evaluation_release", release.uri, release.sha256, contract=contract_ref),
            metadata={
                **object_metadata(release.uri, release.sha256, pub.version),
                "release id": release.document.id,
                "benchmarks": table(
                    rows,
                    [
                        ("benchmark", "string"),
                        ("items", "int"),
                        ("fields", "string"),
                        ("sha256", "string"),
                        ("source", "string"),
                    ],
                ),
                "contract_uri": bound_contract.uri,
                "contract": link(bound_contract.uri),
                "contract_sha256": bound_contract.sha256,
                "contract terms": dg.MetadataValue.json(contract.model_dump(mode="json")),
            },
            data_version=dg.DataVersion(sha256_hex(canonical_json([release.sha256, bound_contract.sha256]))),
        )

    return evaluation_release
