"""What the command tells a new user who gave it the wrong file or a mistyped command (issue 36 item 6):
each command names the file it was given and the command that reads it; a mistyped command gets the
closest one; the Croissant card is named after the dataset; `read` and `trace` take --stage alike."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import TrainVault
from trainvault.cli import build_parser, main


@pytest.fixture(scope="module")
def files(build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A custody chain and its approval record (in a folder of its own, as people keep them)."""
    tmp = tmp_path_factory.mktemp("guidance")
    chain = build_chain(TrainVault(), str(tmp / "data"), shards=2, records_per_shard=10)
    assert main(["keygen", "--out", str(tmp / "k")]) == 0
    request = tmp / "request.json"
    request.write_bytes(chain.request().to_json_bytes())
    approval = tmp / "approvals" / "approval.dsse.json"
    approval.parent.mkdir()
    argv = ["approve", str(request), "--signing-key", str(tmp / "k.key"), "--out", str(approval), "--quiet"]
    assert main(argv) == 0
    return {
        "tmp": str(tmp),
        "manifest": chain.manifest_uri,
        "manifest_sha": hashlib.sha256(Path(chain.manifest_uri.removeprefix("file://")).read_bytes()).hexdigest(),
        "approval": str(approval),
        "sha": hashlib.sha256(approval.read_bytes()).hexdigest(),
        "pub": str(tmp / "k.pub"),
        "key": str(tmp / "k.key"),
        "request": str(request),
        "report": chain.refs["contamination_report"].uri,
    }


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


PINS = ["--sha256", "{sha}", "--trusted-key", "{pub}"]
READS_MANIFEST = "`trainvault inspect {manifest}` summarises it; `trainvault read {manifest}` reads it as stored"
IS_MANIFEST = "{manifest} is a data manifest, not "


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["verify", "{manifest}", *PINS],
            IS_MANIFEST + "an approval record; `trainvault verify` takes an approval record; " + READS_MANIFEST,
        ),
        (  # pinned by its own sha256: the gate got as far as "not a DSSE envelope"
            ["verify", "{manifest}", "--sha256", "{manifest_sha}", "--trusted-key", "{pub}"],
            IS_MANIFEST + "an approval record; `trainvault verify` takes an approval record; " + READS_MANIFEST,
        ),
        (
            ["croissant", "{request}", *PINS],
            "{request} is an approval request, not an approval record; `trainvault croissant` takes an approval "
            "record; `trainvault approve {request} --out APPROVAL.json` runs the gate on it",
        ),
        (
            ["read", "{approval}"],
            "{approval} is a signed approval record (a DSSE envelope), not a data manifest; the data manifest it "
            "approves is {manifest}; `trainvault read` takes a data manifest, or an approval record with --sha256 "
            "and --trusted-key; `trainvault verify {approval} --sha256 PINNED_SHA256",
        ),
        (
            ["read", "{manifest}", *PINS],
            IS_MANIFEST + "an approval record; `trainvault read` takes an approval record, or a data manifest "
            "without --sha256 and --trusted-key; " + READS_MANIFEST,
        ),
        (
            ["trace", "{manifest}", *PINS, "--batch-size", "2", "--step", "0"],
            IS_MANIFEST + "an approval record; `trainvault trace` takes an approval record; " + READS_MANIFEST,
        ),
        (
            ["trace", "--state", "{manifest}", "--step", "0"],
            IS_MANIFEST + "a loader state; `trainvault trace --state` takes a loader state; " + READS_MANIFEST,
        ),
        (
            ["approve", "{approval}", "--signing-key", "{key}", "--out", "{tmp}/x.json"],
            "{approval} is a signed approval record (a DSSE envelope), not an approval request; the data manifest "
            "it approves is {manifest}; `trainvault approve` takes an approval request; `trainvault verify",
        ),
        (
            ["exclusions", "{request}", "--out", "{tmp}/x.json"],
            "{request} is an approval request, not a contamination report; `trainvault exclusions` takes a "
            "contamination report; `trainvault approve {request}",
        ),
        (
            ["exclusions", "{report}", "--out", "{tmp}/x.json", "--request", "{manifest}", "--request-out", "{tmp}/y"],
            IS_MANIFEST
            + "an approval request; `trainvault exclusions --request` takes an approval request; "
            + READS_MANIFEST,
        ),
        (
            ["croissant-check", "{manifest}"],
            IS_MANIFEST + "a Croissant card; `trainvault croissant-check` takes a Croissant card; " + READS_MANIFEST,
        ),
        (
            ["archive", "inspect", "{manifest}"],
            IS_MANIFEST
            + "a rollout archive index; `trainvault archive inspect` takes a rollout archive index; "
            + READS_MANIFEST,
        ),
        (
            ["inspect", "{request}"],
            "{request} is an approval request, not a data manifest or an approval record; `trainvault inspect` "
            "takes a data manifest or an approval record; `trainvault approve {request}",
        ),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else None,
)
def test_a_command_given_another_kind_of_file_says_what_it_is_and_what_reads_it(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    code, out, err = run(capsys, [a.format(**files) for a in argv])
    assert (code, out) == (1, "")
    assert err.startswith("trainvault: error: ") and err.count("\n") == 1
    assert says.format(**files) in err, err


def test_the_right_file_keeps_the_command_s_own_error(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, ["verify", files["approval"], "--sha256", "0" * 64, "--trusted-key", files["pub"]])
    assert code == 1 and "not the pinned" in err and " is a " not in err


def test_croissant_names_the_card_after_the_dataset(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    out = str(Path(files["tmp"]) / "approvals" / "croissant.json")
    code, _, err = run(
        capsys, ["croissant", files["approval"], "--sha256", files["sha"], "--trusted-key", files["pub"]]
    )
    assert code == 0, err
    # The manifest holds no name: the dataset's folder names it (`ds`), not the record's (`approvals`).
    assert json.loads(Path(out).read_bytes())["name"] == "ds"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["verfy"], "trainvault: error: unknown command 'verfy'; did you mean 'verify'?\n"),
        (["croisant"], "trainvault: error: unknown command 'croisant'; did you mean 'croissant'?\n"),
        (["archive", "inspct"], "trainvault archive: error: unknown command 'inspct'; did you mean 'inspect'?\n"),
        (["zzz"], "trainvault: error: unknown command 'zzz'; the commands: inspect, keygen, approve, verify, "),
    ],
)
def test_a_mistyped_command_gets_the_closest_one(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    with pytest.raises(SystemExit) as refused:
        main(argv)
    err = capsys.readouterr().err
    assert refused.value.code == 2 and says in err, err


@pytest.mark.parametrize("command", [["read", "m.json"], ["trace", "--step", "0"]])
def test_read_and_trace_take_repeated_stages_alike(command: list[str]) -> None:
    args = build_parser().parse_args([*command, "--stage", "easy", "--stage", "hard"])
    assert args.stage == ["easy", "hard"]  # the loader's curriculum_stages: their union
    assert build_parser().parse_args(command).stage is None  # the whole split
