"""`trainvault trace`: from a saved state alone, and from a signed approval."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")


from trainvault import TrainVault  # noqa: E402
from trainvault.cli import main  # noqa: E402
from trainvault.loading import LoaderPlan, SplitLoaderFactory  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def ids(records: list[dict[str, Any]]) -> list[Any]:
    return [r["id"] for r in records]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def chain(build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("trace-cli")
    return build_chain(TrainVault(), str(root / "data"), shards=3, records_per_shard=20, block_bytes=600)


def _loader(chain: Any, rank: int, world: int, **kw: Any) -> Any:
    exclude = kw.pop("exclude", None)
    plan = LoaderPlan.create(collate_fn=ids, rank=rank, world_size=world, dataloader_args={"batch_size": 3}, **kw)
    factory = SplitLoaderFactory(TrainVault().storage, chain.manifest_uri, plan, exclude=exclude)
    return factory.load("train", curriculum_stages=["hard", "easy"])


def _approved(chain: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """`trace APPROVAL --sha256 ... --trusted-key ...` of a fresh approval of `chain`."""
    prefix = str(tmp_path / "approver")
    assert run(capsys, "keygen", "--out", prefix)[0] == 0
    request = tmp_path / "request.json"
    request.write_bytes(chain.request().to_json_bytes())
    approval = str(tmp_path / "approval.json")
    code, out, err = run(capsys, "approve", str(request), "--signing-key", prefix + ".key", "--out", approval)
    assert code == 0, err
    return ["trace", approval, "--sha256", out.split("sha256")[1].split()[0], "--trusted-key", prefix + ".pub"]


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
    by_id = {
        r["id"]: (key, i)
        for key, recs in [
            ("easy/s0", chain.records["s0"]),
            ("easy/s1", chain.records["s1"]),
            ("hard/s2", chain.records["s2"]),
        ]
        for i, r in enumerate(recs)
    }
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
    pinned = _approved(chain, tmp_path, capsys)
    approval, sha, public = pinned[1], pinned[3], pinned[5]
    # A run of batch 3 on 2 ranks, rank 1, step 4: the unshuffled order the approved loader deals.
    code, out, err = run(
        capsys,
        *pinned,
        "--stage",
        "hard",
        "--stage",
        "easy",
        "--batch-size",
        "3",
        "--world-size",
        "2",
        "--step",
        "4",
        "--rank",
        "1",
        "--json",
    )
    assert code == 0, err
    assert [r["id"] for r in json.loads(out)["records"]] == list(_loader(chain, 1, 2))[4]

    # With a state the approved loader wrote.
    from trainvault.approval.record import open_approved

    approved = open_approved(TrainVault(), approval, sha, trusted_keys=[public])
    ld = approved.loader_factory(collate_fn=ids, dataloader_args={"batch_size": 3}).load("train")
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


def test_trace_from_a_state_saved_after_an_elastic_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 1 rank, batch 8 for 10 steps; resumed on 2 ranks, batch 5; the state saved at step 40.
    uri = str(tmp_path / "ds" / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(uri, block_bytes=300)
    for s in range(3):
        saver.save("train", None, [{"id": s * 1000 + k, "text": f"r{s}-{k}"} for k in range(100)], shard_id=f"s{s}")
    saver.commit_manifest()

    def make(rank: int, world: int, batch: int) -> Any:
        plan = LoaderPlan.create(
            collate_fn=ids, shuffle=True, seed=3, rank=rank, world_size=world, dataloader_args={"batch_size": batch}
        )
        return SplitLoaderFactory(TrainVault().storage, uri, plan).load("train")

    first = make(0, 1, 8)
    it = iter(first)
    yielded = {(step, 0): (0, next(it)) for step in range(10)}  # (step, rank) -> (epoch, batch)
    resume = first.state_dict()
    saved: dict[str, Any] = {}
    for rank in range(2):
        ld = make(rank, 2, 5)
        ld.load_state_dict(resume)
        step, epoch = 10, 0
        while step < 90:  # epoch by epoch, each a new iter(), as a trainer does
            for batch in ld:
                yielded[(step, rank)] = (epoch, batch)
                step += 1
                if step == 40 and rank == 0:
                    saved = ld.state_dict()
                if step == 90:
                    break
            epoch += 1
    assert max(epoch for epoch, _ in yielded.values()) == 2
    state = tmp_path / "state.json"
    state.write_text(json.dumps(saved))
    for (step, rank), (epoch, batch) in sorted(yielded.items()):
        code, out, err = run(capsys, "trace", "--state", str(state), "--step", str(step), "--rank", str(rank), "--json")
        assert code == 0, (step, rank, err)
        doc = json.loads(out)
        assert (doc["step"], doc["rank"], doc["epoch"]) == (step, rank, epoch)
        assert [r["id"] for r in doc["records"]] == batch, (step, rank)
    code, out, err = run(capsys, "trace", "--state", str(state), "--step", "9", "--rank", "1")
    assert (code, out) == (1, "") and "step 9 ran on 1 rank(s)" in err


def test_trace_of_an_approval_needs_the_run_s_batch_size(
    chain: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pinned = _approved(chain, tmp_path, capsys)
    code, out, err = run(capsys, *pinned, "--step", "3")
    assert (code, out) == (1, "") and "needs --batch-size" in err and err.count("\n") == 1
    with pytest.raises(SystemExit):
        main(["trace", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    for shown in (
        "the run's batch size (required)",
        "number of ranks (default 1)",
        "the split (default train)",
        "the rank (default 0)",
        "trusted keys (default 1)",
    ):
        assert shown in helptext
    # A state names the run itself: options that would describe another run are refused, not ignored.
    ld = _loader(chain, 0, 1)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(ld.state_dict()))
    code, out, err = run(capsys, "trace", "--state", str(state), "--step", "0", "--batch-size", "4")
    assert (code, out) == (1, "") and "--batch-size describe a run without a state" in err


def test_trace_argument_errors_come_before_any_data_is_read(
    build_chain: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = build_chain(TrainVault(), str(tmp_path / "data"), shards=2, records_per_shard=10)
    pinned = _approved(chain, tmp_path, capsys)
    shard = next((tmp_path / "data").rglob("*.msgpack.zst"))
    shard.write_bytes(b"\0" * (shard.stat().st_size - 1))  # opening the approval now fails: its size
    code, _, err = run(capsys, *pinned, "--batch-size", "3", "--step", "0")
    assert code == 1 and "changed after it was scanned" in err  # the store would fail, had it been read
    for argv, says in [
        (["--step", "-1"], "--step and --rank must be >= 0"),
        (["--step", "0", "--rank", "2", "--world-size", "2"], "--rank 2 is not one of the run's 2 rank(s)"),
        (["--step", "0", "--split", "nope"], "split 'nope' is not in"),
        (["--step", "0", "--stage", "nope"], "curriculum stage(s) 'nope' not in split 'train'"),
    ]:
        code, out, err = run(capsys, *pinned, "--batch-size", "3", *argv)
        assert (code, out) == (1, "") and says in err and "scanned" not in err, argv
    # From a state whose manifest is gone: the step and rank are checked against the state's history first.
    ld = _loader(chain, 0, 1)
    doc = {**ld.state_dict(), "manifest_uri": str(tmp_path / "gone" / "data-manifest-v1.json")}
    state = tmp_path / "state.json"
    state.write_text(json.dumps(doc))
    code, _, err = run(capsys, "trace", "--state", str(state), "--step", "0")
    assert code == 1 and "does not exist" in err
    for argv, says in [
        (["--step", "-2"], "--step and --rank must be >= 0"),
        (["--step", "4", "--rank", "1"], "step 4 ran on 1 rank(s)"),
    ]:
        code, out, err = run(capsys, "trace", "--state", str(state), *argv)
        assert (code, out) == (1, "") and says in err and "does not exist" not in err, argv


def test_trace_and_read_take_a_shuffled_multi_rank_approval_with_exclusions(
    build_chain: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainvault.approval import ApprovalPolicy, write_approval, write_keypair
    from trainvault.approval.gate import approve_dataset
    from trainvault.approval.record import open_approved
    from trainvault.contamination import exclusions_from_report

    chain = build_chain(TrainVault(), str(tmp_path / "dirty"), shards=3, records_per_shard=20, contaminate=True)
    ex = exclusions_from_report(chain.extra["report"], report_sha256=chain.refs["contamination_report"].sha256)
    policy = ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 10))
    approved = approve_dataset(chain.vault, chain.with_exclusions(ex), policy=policy)
    _, public, key = write_keypair(tmp_path / "approver")
    record = write_approval(chain.vault, str(tmp_path / "approval.json"), approved, signing_keys=key)
    pinned = [record.uri, "--sha256", record.sha256, "--trusted-key", str(public), "--allow-exclusions"]
    pinned += ["--max-excluded", "1/10", "--quiet"]
    excluded = {f"s2-{r.record_index}" for r in ex.records}
    assert excluded == {"s2-10"}
    opened = open_approved(chain.vault, record.uri, record.sha256, trusted_keys=[public], policy=policy)
    order = {"shuffle": True, "seed": 11}
    per_rank = [
        list(
            opened.loader_factory(
                collate_fn=ids, dataloader_args={"batch_size": 3}, rank=r, world_size=2, **order
            ).load("train")
        )
        for r in (0, 1)
    ]
    dealt = [i for batches in per_rank for b in batches for i in b]
    assert len(dealt) == 59 and not excluded & set(dealt)
    run_options = ["--batch-size", "3", "--world-size", "2", "--shuffle", "--seed", "11", "--json"]
    for rank in (0, 1):
        for step in (0, len(per_rank[rank]) - 1):
            code, out, err = run(capsys, "trace", *pinned, *run_options, "--step", str(step), "--rank", str(rank))
            assert code == 0, err
            assert [r["id"] for r in json.loads(out)["records"]] == per_rank[rank][step]
    # read: the approved loader of one rank of a shuffled run, every record of that rank's share.
    code, out, err = run(capsys, "read", *pinned, "--shuffle", "--seed", "11", "--world-size", "2", "--rank", "1")
    assert code == 0, err
    assert out.startswith(f"read {sum(len(b) for b in per_rank[1])} records of split 'train'")
    # An approval read without its pin is refused in one line, before any data is read.
    code, out, err = run(capsys, "read", record.uri, "--trusted-key", str(public))
    assert (code, out) == (1, "") and "needs both --sha256" in err and err.count("\n") == 1
