"""evaluation_release: the benchmarks a dataset is checked against, and the verifier contract.

Each benchmark's item file is published create-only and bound by SHA-256 in the release
document; the release folder is named by a digest of the item files, so a new version
of a benchmark is a new release, never an overwrite. The verifier contract (method,
normalisation, n-gram size, scanned fields, pass policy) is published by its digest too.
"""


import dagster as dg

from assets._common import GROUP, link, table
from resources.dataset import DatasetSpec, load_callable
from resources.storage import ObjectStore
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.contamination import MethodSpec, VerifierContract, publish_document, publish_release


@dg.asset(group_name=GROUP, kinds={"python"}, code_version="1", backfill_policy=dg.BackfillPolicy.single_run())
def evaluation_release(context: dg.AssetExecutionContext, store: ObjectStore, dataset: DatasetSpec) -> dg.MaterializeResult:
    vault = store.vault()
    benchmarks = [load_callable(source)() for source in dataset.evaluation_sources]
    digest = sha256_hex(canonical_json([[b.name, sha256_hex(b.jsonl_bytes())] for b in benchmarks]))
    release = publish_release(vault.storage, dataset.evaluation_root(digest), dataset.evaluation_release_id, benchmarks)
    contract = VerifierContract(method=MethodSpec(n=dataset.ngram_n), fields=list(dataset.scan_fields))
    bound_contract = publish_document(vault.storage, dataset.contract_uri(contract.document_sha256()), contract)
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
    return dg.MaterializeResult(
        metadata={
            "release id": release.document.id,
            "uri": release.uri,
            "open": link(release.uri),
            "sha256": release.sha256,
            "benchmarks": table(
                rows, [("benchmark", "string"), ("items", "int"), ("fields", "string"), ("sha256", "string"), ("source", "string")]
            ),
            "contract_uri": bound_contract.uri,
            "contract_sha256": bound_contract.sha256,
            "contract": dg.MetadataValue.json(contract.model_dump(mode="json")),
        },
        data_version=dg.DataVersion(sha256_hex(canonical_json([release.sha256, bound_contract.sha256]))),
    )
