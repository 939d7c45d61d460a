"""Write a small dataset, an evaluation release, an ngram-exact-v1 contract and its
contamination report into memory://, then print the report's bytes.

tests/library/golden/contamination-report-v1.json holds these bytes as written by the code of
main before tvnorm-v2 existed (issue 19); tests/library/contamination/test_contamination_v2.py checks that
today's code still reads that report and writes it byte for byte. Never refresh it.

    .venv/bin/python tests/library/golden/build_v1_report.py > tests/library/golden/contamination-report-v1.json
"""

from __future__ import annotations

import html
import json
import sys

from trainvault import TrainVault
from trainvault.contamination import (
    VerifierContract,
    jsonl_benchmark,
    load_index,
    publish_release,
    scan_dataset,
    write_report,
)
from trainvault.publication.bound import write_document

ROOT = "memory://golden-v1"
ITEMS = [
    'def rolling_max(numbers: List[int]) -> List[int]:\n    """ From a given list of integers, generate a '
    "list of rolling maximum element found until given moment in the sequence.\n    >>> rolling_max([1, 2, 3, 2, 3, "
    '4, 2])\n    [1, 2, 3, 3, 3, 4, 4]\n    """\n',
    'def below_zero(operations: List[int]) -> bool:\n    """ You\'re given a list of deposit and withdrawal '
    "operations on a bank account that starts with\n    zero balance. Your task is to detect if at any point the "
    "balance of account fallls below zero, and\n    at that point function should return True.\n",
    'def truncate_number(number: float) -> float:\n    """ Given a positive floating point number, it can be '
    "decomposed into\n    and integer part (largest integer smaller than given number) and decimals\n",
]
BENCHMARK = b"".join(json.dumps({"id": f"item-{i}", "text": t}).encode() + b"\n" for i, t in enumerate(ITEMS))
#: v1's own contract, spelled so that code from before and after tvnorm-v2 reads it alike.
CONTRACT = {"method": {"id": "ngram-exact-v1", "normalization": {"id": "tvnorm-v1"}}}


def records() -> list[dict[str, str]]:
    """Filler, then each item verbatim, with zero-width spaces, HTML-escaped and JSON-escaped."""
    out = [{"id": f"r{i}", "text": f"filler record {i} about nothing in particular"} for i in range(6)]
    forms = [
        ITEMS[0],
        ITEMS[1].replace("operations", "oper\u200bations"),
        "<pre><code>" + html.escape(ITEMS[2]) + "</code></pre>",
        json.dumps({"text": ITEMS[0]}),
    ]
    for k, text in enumerate(forms):
        out.insert(1 + k, {"id": f"planted-{k}", "text": "lead-in words " + text + " trailing words"})
    return out


def main() -> None:
    vault = TrainVault()
    saver = vault.dataset_saver(f"{ROOT}/dataset/data-manifest-v1.json", data_format="jsonl.gz")
    saver.save("train", None, records(), shard_id="0")
    # The manifest as trainvault wrote it before descriptor packs: the report binds its digest.
    unpacked = saver.build_manifest().model_copy(update={"descriptor_pack": None})
    vault.storage.put_create(saver.manifest_uri, unpacked.to_json_bytes())
    release = publish_release(vault.storage, f"{ROOT}/release", "golden-v1-evals", [jsonl_benchmark("tiny", BENCHMARK)])
    contract = write_document(
        vault.storage, f"{ROOT}/verifier-contract-v1.json", VerifierContract.model_validate(CONTRACT)
    )
    index = load_index(vault, release, contract)
    report = scan_dataset(
        vault, saver.manifest_uri, index, scan_manifest_sha256="1" * 64, producer_pins_sha256="2" * 64, progress=False
    )
    bound = write_report(vault, f"{ROOT}/dataset/contamination-report-v1.json", report)
    sys.stdout.buffer.write(vault.storage.get(bound.uri))


if __name__ == "__main__":
    main()
