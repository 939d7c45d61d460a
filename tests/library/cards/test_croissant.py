"""The Croissant card of an approved dataset: mlcroissant validates it and reads the same records
trainvault yields (jsonl.gz, parquet); a msgpack.zst card validates; bad approvals write no card."""

from __future__ import annotations

import hashlib
import json
import math
import random
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pytest
import zstandard

from trainvault import TrainVault
from trainvault.approval import ApprovalPolicy, SigningKey, write_approval, write_keypair
from trainvault.cards import write_croissant
from trainvault.cards.croissant import croissant_card, default_card_uri
from trainvault.cli import main
from trainvault.contamination import exclusions_from_report
from trainvault.errors import ApprovalError, ConflictError, ManifestError
from trainvault.profile import approval_sidecars, profile_publication, write_metrics_sidecars

mlc = pytest.importorskip("mlcroissant")

RECOMMENDED = {"citeAs", "datePublished", "license", "version"}
ABOUT = {
    "license": "https://creativecommons.org/licenses/by/4.0/",
    "cite_as": "@misc{tiny, title={tiny}}",
    "version": "1.0.0",
    "date_published": "2026-12-01",
}


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """mlcroissant must read the card and the shards from local files: any connection but one to the
    loopback S3 test server fails."""
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def guard(real: Any) -> Any:
        def checked(self: socket.socket, address: Any) -> Any:
            if not (isinstance(address, tuple) and address[0] in ("127.0.0.1", "::1", "localhost")):
                raise OSError(f"test_croissant: no network, but something connected to {address!r}")
            return real(self, address)

        return checked

    monkeypatch.setattr(socket.socket, "connect", guard(connect))
    monkeypatch.setattr(socket.socket, "connect_ex", guard(connect_ex))


def typed_records(shard: int, n: int = 12) -> list[dict[str, Any]]:
    rng = random.Random(shard)
    return [
        {
            "id": f"s{shard}-{i}",
            "text": f"record {i} ünïcode {rng.random()}",
            "tokens": rng.randrange(-5, 10**12),
            "score": rng.random() * 10 ** rng.randrange(-3, 4),
            "ok": rng.random() < 0.5,
            "tags": [rng.choice("abc") for _ in range(rng.randrange(0, 4))],
            "meta": {"source": rng.choice(["web", "books"]), "page": i},
        }
        for i in range(n)
    ]


@pytest.fixture
def opened_chain(build_chain: Callable[..., Any]) -> Callable[..., tuple[Any, Any]]:
    def make(
        tmp_path: Path,
        data_format: str,
        shard_records: Any = typed_records,
        profile: bool = True,
        vault: TrainVault | None = None,
        root: str | None = None,
    ) -> tuple[Any, Any]:
        """A signed approval of a 3-shard chain (metrics sidecars bound), opened as a trainer opens it."""
        vault = vault or TrainVault()
        chain = build_chain(
            vault, root or str(tmp_path / "data"), shards=3, data_format=data_format, shard_records=shard_records
        )
        sidecars = {}
        if profile:
            refs = write_metrics_sidecars(vault.storage, profile_publication(vault.storage, chain.manifest_uri))
            sidecars = approval_sidecars(refs)
        approved = vault.approve_dataset(chain.request(sidecars=sidecars))
        write_keypair(str(tmp_path / "approver"))
        record = write_approval(
            vault, f"{chain.root}/ds/approval-v1.dsse.json", approved, signing_keys=str(tmp_path / "approver.key")
        )
        chain.extra.update(record=record, pub=str(tmp_path / "approver.pub"))
        return chain, vault.open_approved(record.uri, record.sha256, trusted_keys=[chain.extra["pub"]])

    return make


def issues(dataset: Any) -> tuple[set[str], set[str]]:
    found = dataset.metadata.ctx.issues
    return set(found.errors), set(found.warnings)


def trainvault_records(approved: Any, split: str) -> list[dict[str, Any]]:
    loader = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 4}).load(split)
    return [r for batch in loader for r in batch]


def plain(value: Any, data_type: str) -> Any:
    """An mlcroissant value as trainvault holds it: Text fields come back as UTF-8 bytes."""
    if isinstance(value, (list, np.ndarray)):
        return [plain(v, data_type) for v in value]
    if data_type == "sc:Text" and isinstance(value, bytes):
        return value.decode("utf-8")
    return value.item() if isinstance(value, np.generic) else value


def same(a: Any, b: Any, float_rel_tol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=float_rel_tol, abs_tol=0.0)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, float_rel_tol) for x, y in zip(a, b, strict=False))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], float_rel_tol) for k in a)
    return type(a) is type(b) and a == b


def croissant_records(dataset: Any, card: dict[str, Any], split: str) -> list[dict[str, Any]]:
    """mlcroissant's records keyed by field name (ids are ``<split>/<key>[/<sub-key>]``, percent-encoded)."""
    fields = next(rs["field"] for rs in card["recordSet"] if rs["@id"] == split)
    types = {f["@id"]: f.get("dataType") for top in fields for f in [top, *top.get("subField", [])]}

    def named(record: dict[str, Any]) -> dict[str, Any]:
        return {
            unquote(k.rsplit("/", 1)[1]): named(v) if isinstance(v, dict) else plain(v, types[k])
            for k, v in record.items()
        }

    return [named(record) for record in dataset.records(split)]


# mlcroissant parses JSON Lines with pandas' fast float parser (precise_float off): off by up to ~1e-11 relative.
@pytest.mark.parametrize("data_format, float_rel_tol", [("jsonl.gz", 1e-11), ("parquet", 0.0)])
def test_mlcroissant_validates_the_card_and_reads_the_records_trainvault_yields(
    opened_chain: Callable[..., tuple[Any, Any]], tmp_path: Path, data_format: str, float_rel_tol: float
) -> None:
    chain, approved = opened_chain(tmp_path, data_format)
    written = write_croissant(chain.vault, approved, **ABOUT)
    assert written.uri == default_card_uri(approved) == f"file://{chain.root}/ds/croissant.json"
    card = json.loads(Path(written.uri.removeprefix("file://")).read_bytes())
    dataset = mlc.Dataset(jsonld=written.uri.removeprefix("file://"))
    assert issues(dataset) == (set(), set())
    for split in ("train", "valid"):
        expected = trainvault_records(approved, split)
        got = croissant_records(dataset, card, split)
        assert len(got) == len(expected) > 0
        for g, e in zip(got, expected, strict=False):
            assert g.keys() == e.keys()
            assert all(same(g[k], e[k], float_rel_tol) for k in e), (g, e)
    types = {
        f["name"]: f.get("dataType") or {s["name"]: s["dataType"] for s in f["subField"]}
        for f in card["recordSet"][0]["field"]
    }
    assert types == {
        "id": "sc:Text",
        "text": "sc:Text",
        "tokens": "sc:Integer",
        "score": "sc:Float",
        "ok": "sc:Boolean",
        "tags": "sc:Text",
        "meta": {"source": "sc:Text", "page": "sc:Integer"},
    }


def test_an_empty_shard_stays_out_of_the_file_set_parquet_readers_read(
    opened_chain: Callable[..., tuple[Any, Any]], tmp_path: Path
) -> None:
    chain, approved = opened_chain(
        tmp_path, "parquet", shard_records=lambda i: [] if i == 1 else typed_records(i), profile=False
    )
    written = write_croissant(chain.vault, approved, **ABOUT)
    card = json.loads(Path(written.uri.removeprefix("file://")).read_bytes())
    by_id = {node["@id"]: node for node in card["distribution"]}
    assert by_id["files/train/easy/s1"]["contentSize"] == "0 B"
    assert by_id["files/train/shards"]["includes"] == ["shards/train/easy/s0.parquet", "shards/train/hard/s2.parquet"]
    dataset = mlc.Dataset(jsonld=written.uri.removeprefix("file://"))
    assert croissant_records(dataset, card, "train") == trainvault_records(approved, "train") != []


def test_card_binds_shards_approval_stages_curricula_and_profile(
    opened_chain: Callable[..., tuple[Any, Any]], tmp_path: Path
) -> None:
    chain, approved = opened_chain(tmp_path, "jsonl.gz")
    card = croissant_card(chain.vault, approved)
    by_id = {node["@id"]: node for node in card["distribution"]}
    manifest = approved.manifest
    for split, sm in manifest.splits.items():
        for entry in sm.shards:
            node = by_id[f"files/{split}/{entry.key}"]
            assert (node["sha256"], node["contentSize"]) == (entry.sha256, f"{entry.size_bytes} B")
            assert (chain.root + "/ds/" + node["contentUrl"]) == entry.uri.removeprefix("file://")
        assert by_id[f"files/{split}/shards"]["includes"] == [
            by_id[f"files/{split}/{e.key}"]["contentUrl"] for e in sm.shards
        ]
    record = chain.extra["record"]
    assert by_id["files/custody/approval"]["sha256"] == record.sha256 == card["tv:approval"]["record"]["sha256"]
    assert by_id["files/custody/data-manifest"]["sha256"] == approved.manifest_sha256
    train = next(rs for rs in card["recordSet"] if rs["@id"] == "train")
    assert train["tv:stages"] == {"easy": ["easy/s0", "easy/s1"], "hard": ["hard/s2"]}
    assert train["tv:recordCount"] == 36 == train["tv:profile"]["metrics"]["number_of_examples"]
    assert train["tv:profile"]["sidecar"]["sha256"] == approved.bindings["train_metrics"].sha256
    dataset = mlc.Dataset(jsonld=card)  # a card without recommended properties: warnings, no errors
    errors, warnings = issues(dataset)
    assert not errors and {w.split('"')[1].rsplit("/", 1)[1] for w in warnings} == RECOMMENDED


def test_every_file_object_states_the_sha256_and_size_of_its_bytes(
    opened_chain: Callable[..., tuple[Any, Any]], tmp_path: Path
) -> None:
    chain, approved = opened_chain(tmp_path, "jsonl.gz", profile=False)
    card = croissant_card(chain.vault, approved)
    objects = [node for node in card["distribution"] if node["@type"] == "cr:FileObject"]
    assert {"files/custody/approval", "files/custody/data-manifest"} <= {node["@id"] for node in objects}
    for node in objects:
        data = Path(chain.root, "ds", node["contentUrl"]).read_bytes()
        assert (node["sha256"], node["contentSize"]) == (hashlib.sha256(data).hexdigest(), f"{len(data)} B"), node[
            "@id"
        ]


def test_a_msgpack_card_validates_and_says_mlcroissant_cannot_read_it(
    opened_chain: Callable[..., tuple[Any, Any]], tmp_path: Path
) -> None:
    def records(shard: int) -> list[dict[str, Any]]:
        rng = np.random.default_rng(shard)
        return [
            {
                "id": f"s{shard}-{i}",
                "text": "words",
                "tokens": rng.integers(0, 50_000, 16, dtype=np.int32),
                "meta": {"source": "x", "deep": {"a": 1}, 'say "hi"': 1},
                "blob": bytes([0x80 + i]),  # not UTF-8
                "utf8": f"word {i}".encode(),
                "mixed": i if i % 2 else str(i),
            }
            for i in range(5)
        ]

    chain, approved = opened_chain(tmp_path, "msgpack.zst", shard_records=records, profile=False)
    written = write_croissant(chain.vault, approved, **ABOUT)
    card = json.loads(Path(written.uri.removeprefix("file://")).read_bytes())
    assert issues(mlc.Dataset(jsonld=written.uri.removeprefix("file://"))) == (set(), set())
    shard = next(n for n in card["distribution"] if n["@id"] == "files/train/easy/s0")
    assert shard["encodingFormat"] == "application/zstd" and "cannot decode" in shard["description"]
    fields = {f["name"]: f for f in card["recordSet"][0]["field"]}
    assert (fields["tokens"]["dataType"], fields["tokens"]["isArray"], fields["tokens"]["arrayShape"]) == (
        "cr:Int32",
        True,
        "16",
    )
    assert "source" in fields["tokens"] and "raw bytes" in fields["blob"]["description"]
    assert (fields["utf8"]["dataType"], fields["utf8"]["description"]) == ("sc:Text", "text stored as UTF-8 bytes")
    meta = {f["name"]: f for f in fields["meta"]["subField"]}
    assert meta["source"]["source"]["transform"] == {"jsonPath": '"source"'}
    assert "source" not in meta['say "hi"'] and "JSONPath cannot name" in meta['say "hi"']["description"]
    for field in (
        meta["deep"],
        fields["mixed"],
        fields["blob"],
    ):  # no Croissant type: no source, and the description says why
        assert "source" not in field and "no type for this" in field["description"]


def test_an_approval_without_a_signed_record_gets_no_card(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    vault = TrainVault()
    chain = build_chain(vault, str(tmp_path / "data"), shards=2, data_format="jsonl.gz")
    with pytest.raises(ApprovalError, match="open_approved"):
        croissant_card(vault, vault.approve_dataset(chain.request()))
    with pytest.raises(TypeError, match="ApprovedDataset"):
        croissant_card(vault, chain.request())


def test_node_ids_that_would_collide_are_refused() -> None:
    from trainvault.cards.croissant import _check_unique_ids

    # A split named "files" whose field "custody" holds objects with a key "approval".
    record_set = {"@id": "files", "field": [{"@id": "files/custody", "subField": [{"@id": "files/custody/approval"}]}]}
    _check_unique_ids([{"@id": "files/custody/data-manifest"}, record_set])
    with pytest.raises(ManifestError, match="'files/custody/approval'"):
        _check_unique_ids([{"@id": "files/custody/approval"}, record_set])


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_command_writes_the_card_of_a_verified_approval_only(
    opened_chain: Callable[..., tuple[Any, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain, approved = opened_chain(tmp_path, "parquet", profile=False)
    record, pub = chain.extra["record"], chain.extra["pub"]
    out_path = tmp_path / "cards" / "croissant.json"
    base = ["croissant", record.uri, "--sha256", record.sha256, "--trusted-key", pub, "--quiet"]
    args = [*base, "--out", str(out_path)]

    write_keypair(str(tmp_path / "other"))
    tampered = (
        chain.refs["data_manifest"]
        .uri.removeprefix("file://")
        .replace("data-manifest-v1.json", "shards/valid/_/v0.parquet")
    )
    for bad, says in [
        (["--sha256", "0" * 64], "not the pinned"),
        (["--trusted-key", str(tmp_path / "other.pub")], "trusted keys"),
    ]:
        argv = list(args)
        argv[argv.index(bad[0]) + 1] = bad[1]
        code, out, err = run(capsys, *argv)
        assert (code, out) == (1, "") and err.startswith("trainvault: error: ") and says in err
        assert not out_path.exists()
    # mlcroissant refuses a datePublished that is not ISO 8601, and a card is create-only: refused before writing.
    for date in ("yesterday", "2026-13-45", "01/12/2026"):
        code, out, err = run(capsys, *args, "--date-published", date)
        assert (code, out) == (1, "") and "not an ISO 8601 date" in err and not out_path.exists()

    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert out.splitlines()[0] == f"croissant file://{out_path}"
    card = json.loads(out_path.read_bytes())
    assert card["distribution"][2]["contentUrl"] == "../data/ds/shards/train/easy/s0.parquet"
    assert card["tv:approval"]["record"]["sha256"] == record.sha256
    assert run(capsys, *args)[:2] == (0, out)  # the same card again: a no-op
    code, _, err = run(capsys, *args, "--name", "another")
    assert code == 1 and "already exists with different content" in err
    with pytest.raises(ConflictError):
        write_croissant(chain.vault, approved, f"file://{out_path}", name="another")

    Path(tampered).write_bytes(Path(tampered).read_bytes()[:-1] + b"\0")  # a shard changed after approval
    other = tmp_path / "after-tamper.json"
    code, _, err = run(capsys, *base, "--out", str(other))
    # The open reads no shard; the card's own read of it refuses the changed bytes, naming the shard.
    assert code == 1 and f"{tampered}: footer sha256 does not match" in err and not other.exists()


def test_a_card_on_s3_points_at_its_shards_relatively_and_a_local_one_by_s3_uri(
    opened_chain: Callable[..., tuple[Any, Any]], tmp_path: Path, s3_vault: TrainVault, s3_bucket: str
) -> None:
    _, approved = opened_chain(tmp_path, "jsonl.gz", vault=s3_vault, root=f"s3://{s3_bucket}/data", profile=False)
    beside = write_croissant(s3_vault, approved, **ABOUT)
    assert beside.uri == f"s3://{s3_bucket}/data/ds/croissant.json"
    local = write_croissant(s3_vault, approved, str(tmp_path / "croissant.json"), **ABOUT)
    for written, url in [
        (beside, "shards/train/easy/s0.jsonl.gz"),
        (local, f"s3://{s3_bucket}/data/ds/shards/train/easy/s0.jsonl.gz"),
    ]:
        card = json.loads(s3_vault.storage.get(written.uri))
        assert next(n for n in card["distribution"] if n["@id"] == "files/train/easy/s0")["contentUrl"] == url
        assert issues(mlc.Dataset(jsonld=card)) == (set(), set())


@pytest.fixture
def planted_records(eval_items: list[dict[str, str]]) -> Callable[..., list[dict[str, Any]]]:
    def make(shard: int) -> list[dict[str, Any]]:
        """typed_records with a test-release item planted in some records of shards 0 and 2."""
        records = typed_records(shard)
        for i in {0: [2, 7], 2: [5]}.get(shard, []):
            records[i]["text"] += " " + eval_items[1]["text"]
        return records

    return make


@pytest.mark.parametrize("data_format, float_rel_tol", [("jsonl.gz", 1e-11), ("parquet", 0.0), ("msgpack.zst", 0.0)])
def test_a_card_of_an_approval_with_exclusions_hands_no_reader_an_excluded_record(
    planted_records: Callable[..., list[dict[str, Any]]],
    eval_items: list[dict[str, str]],
    build_chain: Callable[..., Any],
    tmp_path: Path,
    data_format: str,
    float_rel_tol: float,
) -> None:
    vault = TrainVault()
    chain = build_chain(vault, str(tmp_path / "data"), shards=3, data_format=data_format, shard_records=planted_records)
    exclusions = exclusions_from_report(chain.extra["report"], report_sha256=chain.refs["contamination_report"].sha256)
    assert [(r.shard, r.record_index) for r in exclusions.records] == [("easy/s0", 2), ("easy/s0", 7), ("hard/s2", 5)]
    allow = ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 10))
    approved = vault.approve_dataset(chain.with_exclusions(exclusions), policy=allow)
    key = SigningKey.generate()
    record = write_approval(vault, f"{chain.root}/ds/approval-v1.dsse.json", approved, signing_keys=[key])
    opened = vault.open_approved(record.uri, record.sha256, trusted_keys=[key.public_key], policy=allow)
    written = write_croissant(vault, opened, **ABOUT)
    card_path = Path(written.uri.removeprefix("file://"))
    card = json.loads(card_path.read_bytes())
    assert write_croissant(vault, opened, **ABOUT) == written  # again: the same card and copies, a no-op

    by_id = {node["@id"]: node for node in card["distribution"]}
    published = {e.key: e for e in opened.manifest.splits["train"].shards}
    for key_, dropped in [("easy/s0", 2), ("hard/s2", 1)]:
        node = by_id[f"files/train/{key_}"]
        data = (card_path.parent / node["contentUrl"]).read_bytes()
        assert node["contentUrl"].startswith("approved-view/") and node["sha256"] != published[key_].sha256
        assert (node["sha256"], node["contentSize"]) == (hashlib.sha256(data).hexdigest(), f"{len(data)} B")
        assert node["contentUrl"] == f"approved-view/{node['sha256']}.{data_format}"  # named by its content
        assert f"without the {dropped} records the approval excludes" in node["description"]
    assert by_id["files/train/easy/s1"]["sha256"] == published["easy/s1"].sha256  # unaffected: as published
    train = next(rs for rs in card["recordSet"] if rs["@id"] == "train")
    assert (train["tv:recordCount"], train["tv:excludedRecords"]) == (33, 3)

    expected = trainvault_records(opened, "train")
    assert len(expected) == 33 and not any(eval_items[1]["text"] in r["text"] for r in expected)
    if data_format == "msgpack.zst":  # mlcroissant cannot decode it; the copies are what trainvault reads
        copy = card_path.parent / by_id["files/train/easy/s0"]["contentUrl"]
        assert b"alpha1" not in zstandard.ZstdDecompressor().decompressobj().decompress(copy.read_bytes())
        return
    dataset = mlc.Dataset(jsonld=str(card_path))
    assert issues(dataset) == (set(), set())
    # mlcroissant reads a file set's files in path order, not in the order the card lists them.
    got = sorted(croissant_records(dataset, card, "train"), key=lambda r: r["id"])
    assert len(got) == len(expected)
    for g, e in zip(got, sorted(expected, key=lambda r: r["id"]), strict=False):
        assert g.keys() == e.keys() and all(same(g[k], e[k], float_rel_tol) for k in e), (g, e)
