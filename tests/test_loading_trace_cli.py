"""`trainvault trace`: from a saved state alone, and from a signed approval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from approval_chain import build_chain  # noqa: E402

from trainvault import TrainVault  # noqa: E402
from trainvault.cli import main  # noqa: E402
from trainvault.loading import SplitDataLoader  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def ids(records: list[dict[str, Any]]) -> list[Any]:
    return [r["id"] for r in records]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("trace-cli")
    return build_chain(TrainVault(), str(root / "data"), shards=3, records_per_shard=20, block_bytes=600)


def _loader(chain: Any, rank: int, world: int, **kw: Any) -> Any:
    return SplitDataLoader(TrainVault().storage, chain.manifest_uri, collate_fn=ids, rank=rank, world_size=world,
                           dataloader_args={"batch_size": 3}, **kw).load("train", curriculum_stages=["hard", "easy"])


def test_trace_from_a_state_alone(chain: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ld = _loader(chain, 1, 2, shuffle=True, seed=5)
    got = list(ld)
    it = iter(ld)
    got += [next(it) for _ in range(2)]
    state = tmp_path / "state.json"
    state.write_text(json.dumps(ld.state_dict()))
    step = len(got) - 1
    code, out, err = run(capsys, "trace", "--state", str(state), "--step", str(step), "--rank", "1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["epoch"] == 1 and [r["id"] for r in doc["records"]] == got[step]
    by_id = {r["id"]: (key, i) for key, recs in [("easy/s0", chain.records["s0"]), ("easy/s1", chain.records["s1"]),
                                                 ("hard/s2", chain.records["s2"])] for i, r in enumerate(recs)}
    assert [(r["shard"], r["record_index"]) for r in doc["records"]] == [by_id[i] for i in got[step]]
    code, out, _ = run(capsys, "trace", "--state", str(state), "--step", "0", "--rank", "1", "--records")
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"step 0 rank 1 epoch 0: {len(got[0])} records"
    first = lines[1].split("\t")
    assert first[0] == "train" and json.loads(first[3]) == got[0][0]
    assert json.loads(first[4]) == chain.records[first[1].split("/")[1]][int(first[2])]
    code, out, _ = run(capsys, "trace", "--state", str(state), "--step", "0", "--positions", "--json")
    assert code == 0 and {r["id"] for r in json.loads(out)["records"]} == {None}


def test_trace_from_an_approval(chain: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = str(tmp_path / "approver")
    assert run(capsys, "keygen", "--out", prefix)[0] == 0
    request = tmp_path / "request.json"
    request.write_bytes(chain.request().to_json_bytes())
    approval = str(tmp_path / "approval.json")
    code, out, err = run(capsys, "approve", str(request), "--key", prefix + ".key", "--out", approval)
    assert code == 0, err
    sha = out.split("sha256")[1].split()[0]
    pinned = ["trace", approval, "--sha256", sha, "--key", prefix + ".pub"]
    # A run of batch 3 on 2 ranks, rank 1, step 4: the unshuffled order the approved loader deals.
    code, out, err = run(capsys, *pinned, "--stage", "hard", "--stage", "easy", "--batch-size", "3",
                         "--world-size", "2", "--step", "4", "--rank", "1", "--json")
    assert code == 0, err
    assert [r["id"] for r in json.loads(out)["records"]] == list(_loader(chain, 1, 2))[4]

    # With a state the approved loader wrote.
    from trainvault.approval.record import open_approved

    approved = open_approved(TrainVault(), approval, sha, trusted_keys=[prefix + ".pub"])
    ld = approved.split_data_loader(collate_fn=ids, dataloader_args={"batch_size": 3}).load("train")
    got = list(ld)
    state = tmp_path / "approved-state.json"
    state.write_text(json.dumps(ld.state_dict()))
    code, out, err = run(capsys, *pinned, "--state", str(state), "--step", "2", "--json")
    assert code == 0, err
    assert [r["id"] for r in json.loads(out)["records"]] == got[2]
    code, _, err = run(capsys, "trace", approval, "--sha256", sha, "--step", "0")
    assert code == 1 and "needs --sha256" in err
    # An approval binds its exclusions: another exclude mapping beside it is refused, not ignored.
    excl = tmp_path / "exclude.json"
    excl.write_text(json.dumps({"easy/s0": [1]}))
    code, out, err = run(capsys, *pinned, "--step", "0", "--exclude", str(excl))
    assert (code, out) == (1, "") and "binds its own exclusions" in err


def test_trace_refusals(chain: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ld = _loader(chain, 0, 1, shuffle=True, exclude={"easy/s0": [1, 2]})
    state = ld.state_dict()
    path = tmp_path / "state.json"

    def refused(doc: Any, *extra: str) -> str:
        path.write_bytes(doc if isinstance(doc, bytes) else (doc if isinstance(doc, str) else json.dumps(doc)).encode())
        code, out, err = run(capsys, "trace", "--state", str(path), "--step", "0", *extra)
        assert code == 1 and out == "" and err.startswith("trainvault: error: ") and err.count("\n") == 1
        return err

    assert "same exclusions" in refused(state)  # the exclusions are not in the state, only their digest
    excl = tmp_path / "exclude.json"
    excl.write_text(json.dumps({"easy/s0": [1, 2]}))
    path.write_text(json.dumps(state))
    assert run(capsys, "trace", "--state", str(path), "--step", "0", "--exclude", str(excl))[0] == 0
    excl.write_text(json.dumps({"easy/s0": [1]}))
    assert "same exclusions" in refused(state, "--exclude", str(excl))
    assert "not JSON" in refused("{")
    assert "not JSON" in refused(b"\xff{")  # not UTF-8
    assert "not JSON" in refused("[" * 100_000)  # nested past the parser's depth
    assert "holds a JSON list" in refused([])
    assert "not the loaded manifest" in refused({**state, "manifest_sha256": "0" * 64}, "--exclude", str(excl))
    v1 = {k: v for k, v in state.items() if k not in ("step", "history", "manifest_uri")}
    assert "names no manifest" in refused({**v1, "version": 1})
    assert "--batch-size and --world-size" in refused(state, "--batch-size", "0")
    code, _, err = run(capsys, "trace", "--step", "0")
    assert code == 1 and "APPROVAL or --state" in err
    with pytest.raises(SystemExit):  # read the records and read no data: contradictory
        main(["trace", "--state", str(path), "--step", "0", "--records", "--positions"])
    assert "not allowed with argument" in capsys.readouterr().err
