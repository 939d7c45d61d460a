"""OMS export benchmark: the OpenSSF Model Signing export of a 10,000-shard approval against
reading its manifest and descriptor pack, the raw limit of an export that hashes no data.

One local publication of `--shards` one-record shards with its custody chain, approved (the
gate with a scanner key and no re-scan) and its record written; built once per run. Timed,
round-robin, median of `--repeats`, each in a fresh `TrainVault`:

- read manifest + pack: `Publication.load` of the data manifest and `read_pack` (one read and
  parse of each): what any export must at least read;
- export: `export_oms` of the approval already opened (digests from the approval, one listing
  of the folder, the statement, one ECDSA signature, one create-only put). Goal: <= 2x the read;
- open + export: `open_approved` then `export_oms`, what `trainvault oms-export` runs;
- peer, model_signing sign: `model_signing`'s own signing of the same folder with the same key
  type, which reads and hashes every file.

    .venv/bin/python bench/oms_export.py --shards 10000

Measured on this shared 2-core machine, 10,000 shards, median of 5: read 0.19 s, export 0.35 s
(1.86x), open + export 0.99 s (5.2x), model_signing sign 3.95 s (21x). A busier run of the same
code gave export 2.7x the read: the one listing of the folder's 20,009 files costs about as much
as the read itself, and it is the part that grows with other jobs' load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chain import approval_request, publish_train

from trainvault import TrainVault
from trainvault.approval import ApprovalPolicy, SigningKey, write_approval
from trainvault.approval.ecdsa import write_ecdsa_keypair
from trainvault.approval.oms import export_oms
from trainvault.publication.pinned import Publication

DATA = Path(__file__).resolve().parent / ".data" / "oms_export"


def build(shards: int) -> tuple[str, str, SigningKey, SigningKey]:
    """The approved publication: (record URI, record sha256, approver key, scanner key)."""
    started = time.perf_counter()
    vault, manifest_uri = publish_train(
        DATA, shards, 1, lambda n, start: [{"id": f"r{start}", "text": f"record {start}"}]
    )
    scanner, approver = SigningKey.generate(), SigningKey.generate()
    request = approval_request(vault, str(DATA / "ds"), manifest_uri, scanner_key=scanner)
    approved = vault.approve_dataset(request, policy=policy(scanner))
    record = write_approval(vault, f"{DATA}/ds/approval-v1.dsse.json", approved, signing_keys=approver)
    print(f"built {shards:,} shards and their approval in {time.perf_counter() - started:.0f} s", flush=True)
    return record.uri, record.sha256, approver, scanner


def policy(scanner: SigningKey) -> ApprovalPolicy:
    """The approver's policy, and the trainer's that opens the record: the scanner trusted, no re-scan."""
    return ApprovalPolicy(scanner_keys=[scanner.public_key], rescan_min_shards=0, rescan_fraction=(0, 1))


def median_times(cases: dict[str, Callable[[int], Any]], repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(repeats):
        for name, run in cases.items():
            t = time.perf_counter()
            run(i)
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=10_000, help="one-record shards in the publication")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the median is shown")
    parser.add_argument("--no-peer", action="store_true", help="skip model_signing's own signing")
    args, _ = parser.parse_known_args()  # bench/run.py passes every benchmark the same arguments
    uri, sha256, approver, scanner = build(args.shards)
    out = Path(tempfile.mkdtemp(prefix="oms-bench-"))
    private, _, _ = write_ecdsa_keypair(out / "signer")
    manifest_uri = f"{DATA}/ds/data-manifest-v1.json"
    opened = TrainVault().open_approved(uri, sha256, trusted_keys=[approver.public_key], policy=policy(scanner))

    def read(i: int) -> None:
        storage = TrainVault().storage
        Publication.load(storage, manifest_uri).read_pack(storage)

    def export(i: int) -> None:
        export_oms(TrainVault(), opened, private, out=str(out / f"export-{i}.json"))

    def open_export(i: int) -> None:
        vault = TrainVault()
        approved = vault.open_approved(uri, sha256, trusted_keys=[approver.public_key], policy=policy(scanner))
        export_oms(vault, approved, private, out=str(out / f"open-export-{i}.json"))

    cases: dict[str, Callable[[int], Any]] = {
        "read manifest + pack": read,
        "export": export,
        "open + export": open_export,
    }
    if not args.no_peer:
        from model_signing import hashing, signing

        def peer(i: int) -> None:
            config = signing.Config().use_elliptic_key_signer(private_key=private)
            config.set_hashing_config(hashing.Config().set_ignored_paths(paths=["oms"]))
            config.sign(DATA / "ds", out / f"peer-{i}.json")

        cases["peer: model_signing sign"] = peer
    medians = median_times(cases, args.repeats)
    limit = medians["read manifest + pack"]
    print(f"\nOMS export of a {args.shards:,}-shard approval, median of {args.repeats} (goal: export <= 2x the read)")
    print(f"{'':28} {'seconds':>8} {'× read':>8}")
    for name, seconds in medians.items():
        print(f"{name:28} {seconds:8.3f} {seconds / limit:8.2f}")


if __name__ == "__main__":
    main()
