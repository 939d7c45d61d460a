"""The trainvault command: inspect, keygen, approve, verify; one clear line and exit 1 on failure."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import TrainVault
from trainvault.cli import main


@pytest.fixture
def chain(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    return build_chain(TrainVault(), str(tmp_path / "data"), shards=2, records_per_shard=10)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_inspect(chain: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", chain.manifest_uri)
    assert code == 0
    assert "split train: 2 shards, 20 records" in out and "stage easy: 1 shards" in out and "(no stage)" in out
    code, out, _ = run(capsys, "inspect", "--json", chain.manifest_uri)
    assert json.loads(out)["splits"]["valid"]["records"] == 5


def test_keygen_approve_verify(chain: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = str(tmp_path / "approver")
    code, out, _ = run(capsys, "keygen", "--out", prefix)
    assert code == 0 and "keyid" in out
    request = tmp_path / "request.json"
    request.write_bytes(chain.request().to_json_bytes())
    approval = str(tmp_path / "approval.json")
    code, out, err = run(
        capsys,
        "approve",
        str(request),
        "--signing-key",
        prefix + ".key",
        "--out",
        approval,
        "--provenance",
        "dagster_run_id=r1",
    )
    assert code == 0, err
    sha = out.split("sha256")[1].split()[0]
    code, out, err = run(capsys, "verify", approval, "--sha256", sha, "--trusted-key", prefix + ".pub")
    assert code == 0, err
    assert out.startswith("verified ") and "2 shards" not in out and "3 shards, 25 records" in out
    # A private key and a trusted public key each have their own flag; the old `--key` is refused.
    for argv in (
        ["verify", approval, "--sha256", sha, "--key", prefix + ".pub"],
        ["approve", str(request), "--key", prefix + ".key", "--out", approval],
    ):
        with pytest.raises(SystemExit) as refused:
            main(argv)
        err = capsys.readouterr().err
        assert refused.value.code == 2 and ("required: --trusted-key" in err or "unrecognized arguments: --key" in err)

    # Failure: one line on stderr, exit 1.
    run(capsys, "keygen", "--out", str(tmp_path / "other"))
    code, out, err = run(capsys, "verify", approval, "--sha256", sha, "--trusted-key", str(tmp_path / "other.pub"))
    assert code == 1 and out == ""
    assert err.startswith("trainvault: error: ") and err.count("\n") == 1 and "trusted keys signed it" in err
    code, _, err = run(capsys, "verify", approval, "--sha256", "0" * 64, "--trusted-key", prefix + ".pub")
    assert code == 1 and "not the pinned" in err
    code, _, err = run(capsys, "inspect", str(tmp_path / "missing.json"))
    assert code == 1 and "does not exist" in err


def test_console_script_runs(chain: Any) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "trainvault.cli", "inspect", chain.manifest_uri],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "split train" in proc.stdout
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainvault.cli",
            "verify",
            "nowhere.json",
            "--sha256",
            "x",
            "--trusted-key",
            "nokey.pub",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1


def test_inspect_names_the_entries_their_descriptors_do_not_back(
    chain: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = Path(chain.manifest_uri.removeprefix("file://"))  # the chain binds the canonical URI
    doc = json.loads(path.read_bytes())
    assert doc["descriptor_pack"]  # checked against the pack's copies: one read, not one per shard
    doc["splits"]["train"]["shards"][0]["record_count"] += 1  # an edited manifest, still valid JSON
    doc["splits"]["valid"]["shards"][0]["descriptor_sha256"] = "0" * 64
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "inspect", chain.manifest_uri)
    assert code == 3
    assert "split train: 2 shards, 21 records" in out  # the summary still shows what the manifest claims
    mismatches = [line for line in out.splitlines() if "MISMATCH" in line]
    assert len(mismatches) == 2
    assert mismatches[0].startswith("  MISMATCH split train shard easy/s0: ")
    assert mismatches[1].startswith("  MISMATCH split valid shard _/v0: ")
    assert all("does not hash to the descriptor_sha256 the manifest binds" in m for m in mismatches)
    assert err.count("\n") == 1 and err.startswith("trainvault: error: 2 of 3 shard entries do not match")
    code, out, _ = run(capsys, "inspect", "--json", chain.manifest_uri)
    assert code == 3
    assert [(m["split"], m["key"]) for m in json.loads(out)["mismatches"]] == [("train", "easy/s0"), ("valid", "_/v0")]


def cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainvault.cli", *argv], env=env, capture_output=True, text=True, timeout=120
    )


def test_cli_reads_the_library_s3_variables_and_fails_promptly_without_them(
    s3_key_id: str,
    s3_secret: str,
    closed_loopback_port: Callable[[], int],
    env_without_s3_settings: Callable[..., dict[str, str]],
    s3_config: Callable[..., Any],
    s3_server: str,
    s3_bucket: str,
) -> None:
    uri = f"s3://{s3_bucket}/ds/data-manifest-v1.json"
    saver = TrainVault(storage=s3_config(s3_server)).dataset_saver(uri)
    saver.save("train", None, [{"i": i} for i in range(3)], shard_id="0")
    saver.commit_manifest()
    env = env_without_s3_settings(
        TRAINVAULT_S3_URL=s3_server,
        TRAINVAULT_S3_REGION="us-east-1",
        TRAINVAULT_S3_KEY_ID=s3_key_id,
        TRAINVAULT_S3_SECRET=s3_secret,
    )
    proc = cli("inspect", uri, env=env)
    assert proc.returncode == 0 and "split train: 1 shards, 3 records" in proc.stdout, proc.stderr
    # No settings: at once, naming the variables to set.
    proc = cli("inspect", uri, env=env_without_s3_settings())
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "S3 storage is not configured" in proc.stderr
    assert all(name in proc.stderr for name in ("TRAINVAULT_S3_URL", "TRAINVAULT_S3_KEY_ID", "TRAINVAULT_S3_SECRET"))
    # An endpoint that refuses connections: named, after its first-contact attempts.
    dead = f"http://127.0.0.1:{closed_loopback_port()}"
    proc = cli("inspect", uri, env={**env, "TRAINVAULT_S3_URL": dead})
    assert proc.returncode == 1 and f"the S3 endpoint {dead} did not answer" in proc.stderr.splitlines()[-1]
    assert s3_secret not in proc.stderr and s3_key_id not in proc.stderr


def test_cli_says_which_endpoint_it_is_still_connecting_to(
    env_without_s3_settings: Callable[..., dict[str, str]],
) -> None:
    # A server that accepts connections (the kernel's backlog) and never answers.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        env = env_without_s3_settings(TRAINVAULT_S3_URL=endpoint, TRAINVAULT_S3_KEY_ID="k", TRAINVAULT_S3_SECRET="s")
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainvault.cli", "inspect", "s3://b/data-manifest-v1.json"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
        try:
            first = lines.get(timeout=60)
        finally:
            proc.kill()
            proc.wait()
    assert first == f"trainvault: connecting to {endpoint} ...\n"


def test_progress_bar_on_a_terminal(chain: Any) -> None:
    import io

    from trainvault.approval.hashing import terminal_hash_progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    bar = terminal_hash_progress("hashing", out)
    assert bar is not None and terminal_hash_progress("hashing", io.StringIO()) is None
    chain.vault.approve_dataset(chain.request(), progress=bar)
    assert "hashing [" in out.getvalue() and "100.0%" in out.getvalue() and out.getvalue().endswith("\n")


def test_the_hashing_bar_counts_the_files_the_summary_counts(
    chain: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import re

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    prefix = str(tmp_path / "approver")
    run(capsys, "keygen", "--out", prefix)
    request = tmp_path / "request.json"
    request.write_bytes(chain.request().to_json_bytes())
    approval = str(tmp_path / "approval.json")
    code, out, _ = run(capsys, "approve", str(request), "--signing-key", prefix + ".key", "--out", approval)
    sha = out.split("sha256")[1].split()[0]
    terminal = Tty()
    monkeypatch.setattr("sys.stderr", terminal)
    code = main(["verify", approval, "--sha256", sha, "--trusted-key", prefix + ".pub", "--full"])
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert code == 0, terminal.getvalue()
    done, total = re.findall(r"files (\d+)/(\d+)", terminal.getvalue())[-1]
    hashed = re.search(r"; (\d+) files hashed;", out)
    assert hashed is not None and done == total == hashed.group(1), (terminal.getvalue(), out)


def test_inspect_says_what_another_trainvault_file_is_and_what_reads_it(
    chain: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = str(tmp_path / "approver")
    run(capsys, "keygen", "--out", prefix)
    request = tmp_path / "request.json"
    request.write_bytes(chain.request().to_json_bytes())
    approval = str(tmp_path / "approval.json")
    assert run(capsys, "approve", str(request), "--signing-key", prefix + ".key", "--out", approval, "--quiet")[0] == 0
    # An approval record: what it approves and the policy its gate applied, read without checking signatures.
    code, out, err = run(capsys, "inspect", approval)
    assert (code, err) == (0, "")
    assert out.startswith(f"approval record file://{approval} (signatures not checked: `trainvault verify file://")
    assert f"approves data manifest {chain.manifest_uri} (sha256 {chain.refs['data_manifest'].sha256})" in out
    assert "  approved under:\n    scanner keys: none (every shard re-scanned)" in out
    assert "unscanned fields allowed: none" in out
    code, _, err = run(capsys, "inspect", str(request))
    assert code == 1 and "is an approval request, not a data manifest or an approval record; " in err
    assert "; `trainvault approve" in err
    code, _, err = run(capsys, "inspect", chain.refs["contamination_report"].uri)
    assert code == 1 and "is a contamination report" in err and "`trainvault exclusions" in err
    code, _, err = run(capsys, "inspect", chain.refs["producer_pins"].uri)  # no command reads it: the plain refusal
    assert code == 1 and "expected 'trainvault.data-manifest'" in err


def test_version() -> None:
    from trainvault.version import __version__

    proc = subprocess.run(
        [sys.executable, "-m", "trainvault.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"trainvault {__version__}\n", "")


def test_output_into_a_closed_pipe_ends_quietly(chain: Any) -> None:
    import os

    from trainvault.cli import EXIT_BROKEN_PIPE

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte, as `| head -1` is after its line
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "trainvault.cli", "inspect", "--json", chain.manifest_uri],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (EXIT_BROKEN_PIPE, "")
    with subprocess.Popen(
        [sys.executable, "-m", "trainvault.cli", "inspect", chain.manifest_uri],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as head:
        first = head.stdout.readline()
        head.stdout.close()
        _, err = head.communicate(timeout=60)
    assert first.startswith("manifest ") and err == "" and head.returncode in (0, EXIT_BROKEN_PIPE)


def test_exclusions_then_approve_with_them(
    build_chain: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = build_chain(TrainVault(), str(tmp_path / "dirty"), shards=2, records_per_shard=10, contaminate=True)
    request, bound = tmp_path / "request.json", str(tmp_path / "request-excl.json")
    request.write_bytes(chain.request().to_json_bytes())
    report = chain.refs["contamination_report"].uri
    code, _, err = run(capsys, "exclusions", report, "--out", str(tmp_path / "x.json"), "--request", str(request))
    assert code == 1 and "--request and --request-out go together" in err
    other = str(chain.rescan("other-report.json", pins_sha256="0" * 64)[1].uri)
    code, _, err = run(
        capsys,
        "exclusions",
        other,
        "--out",
        str(tmp_path / "x.json"),
        "--request",
        str(request),
        "--request-out",
        bound,
    )
    assert code == 1 and "pass the report the request binds" in err and not (tmp_path / "x.json").exists()
    code, out, err = run(
        capsys,
        "exclusions",
        report,
        "--out",
        str(tmp_path / "excl.json"),
        "--request",
        str(request),
        "--request-out",
        bound,
    )
    assert code == 0, err
    assert "excluded 1 records; tiny: 1" in out and f"request    file://{bound}" in out
    run(capsys, "keygen", "--out", str(tmp_path / "k"))
    approve = ("approve", bound, "--signing-key", str(tmp_path / "k.key"), "--out", str(tmp_path / "approval.json"))
    code, _, err = run(capsys, *approve)
    assert code == 1 and "does not allow exclusions" in err
    code, _, err = run(capsys, *approve, "--allow-exclusions", "--max-excluded", "1/50")
    assert code == 1 and "more than the policy's 1/50" in err
    code, out, err = run(capsys, *approve, "--allow-exclusions", "--max-excluded", "1/10")
    assert code == 0, err
    sha = out.split("sha256")[1].split()[0]
    verify = ("verify", str(tmp_path / "approval.json"), "--sha256", sha, "--trusted-key", str(tmp_path / "k.pub"))
    assert run(capsys, *verify, "--allow-exclusions", "--max-excluded", "1/10")[0] == 0
    code, _, err = run(
        capsys, *verify, "--allow-exclusions", "--max-excluded", "1/10", "--scanner-key", str(tmp_path / "k.pub")
    )
    assert code == 1 and "is not signed" in err


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--allow-exclusions", "--max-excluded", "abc"], "--max-excluded (N/D) takes a whole number, got 'abc'"),
        (["--allow-exclusions", "--max-excluded", "0.01"], "takes a whole number, got '0.01'"),
        (["--allow-exclusions", "--max-excluded", "2/1"], "max_excluded_fraction must be"),
        (["--allow-exclusions", "--max-excluded", "1/0"], "max_excluded_fraction must be"),
        (["--max-excluded", "1/10"], "pass --allow-exclusions as well"),
        (["--rescan-seed", "x"], "--rescan-seed takes a whole number"),
        (["--rescan", "2", "2"], "pass --scanner-key as well"),
        (["--scanner-threshold", "1"], "pass --scanner-key as well"),
        (["--scanner-key", "{pub}", "--rescan", "a", "b"], "--rescan (MIN_SHARDS PERCENT or N/D) takes a whole number"),
        (["--scanner-key", "{pub}", "--rescan", "-1", "2"], "rescan_min_shards must be a non-negative int"),
        (["--scanner-key", "{pub}", "--rescan", "2", "200"], "rescan_fraction must be"),
        (["--scanner-key", "{pub}", "--rescan", "2", "3/2"], "rescan_fraction must be"),
        (["--scanner-key", "{pub}", "--rescan", "2", "1/x"], "takes a whole number, got 'x'"),
        (["--scanner-key", "{pub}", "--scanner-threshold", "x"], "--scanner-threshold takes a whole number"),
        (["--scanner-key", "{pub}", "--scanner-threshold", "2"], "threshold must be an int from 1"),
        (["--scanner-key", "{dir}"], "cannot read public key"),
        (["--scanner-key", "{dir}/missing.pub"], "cannot read public key"),
    ],
)
def test_bad_policy_options_fail_with_one_line(
    chain: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], says: str
) -> None:
    run(capsys, "keygen", "--out", str(tmp_path / "k"))
    request = tmp_path / "request.json"
    request.write_bytes(chain.request().to_json_bytes())
    argv = [o.format(pub=tmp_path / "k.pub", dir=tmp_path) for o in options]
    approval = tmp_path / "approval.json"
    code, out, err = run(
        capsys, "approve", str(request), "--signing-key", str(tmp_path / "k.key"), "--out", str(approval), *argv
    )
    assert (code, out) == (1, "") and not approval.exists()
    assert err.startswith("trainvault: error: ") and err.count("\n") == 1 and says in err, err
