"""The README's Python examples run as written (against a local folder and the S3 test server)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import S3_KEY, S3_SECRET

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_examples_run_as_written(tmp_path, s3_server, s3_bucket) -> None:
    blocks = python_blocks()
    assert len(blocks) >= 4
    script = tmp_path / "readme_examples.py"
    script.write_text("\n\n".join(blocks))
    env = {
        **os.environ,
        "TRAINVAULT_S3_URL": s3_server,
        "TRAINVAULT_S3_REGION": "us-east-1",
        "TRAINVAULT_S3_KEY_ID": S3_KEY,
        "TRAINVAULT_S3_SECRET": S3_SECRET,
        "TRAINVAULT_S3_BUCKET": s3_bucket,
    }
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "9600"  # the pool example's train records
    assert lines[1].startswith("epoch 0, position 3,200/9,600")  # describe_state() after resuming
    assert lines[2] == "9600"  # before and after the interruption: every record once
    uri, digest = lines[3].split()
    assert uri.endswith("/readme-example/dataset/approval-v1.dsse.json") and len(digest) == 64
    assert lines[4] == "3200"  # every easy record through the approved loader
    assert lines[5] == uri.replace("approval-v1.dsse.json", "croissant.json")  # the Croissant card beside it
    assert len(lines) == 6
    assert (tmp_path / "readme-example" / "dataset" / "data-manifest-v1.json").exists()


def test_readme_names_one_set_of_s3_variables() -> None:
    from trainvault.storage import S3_ENV_VARS

    text = README.read_text()
    cli = text.split("### Command line", 1)[1].split("## Pipeline", 1)[0]
    for variable in S3_ENV_VARS.values():
        assert f"`{variable}`" in cli and f"| `{variable}` |" in text
    assert not re.search(r"TRAINVAULT_S3_ENDPOINT|AWS_ENDPOINT_URL|AWS_ACCESS_KEY_ID|AWS_SECRET_ACCESS_KEY", text)
