"""The code blocks of the README and of every docs page run as written, README first, then the
pages in the order of mkdocs.yml's nav, from a temporary copy of the repository (Python blocks in
one interpreter, shell blocks with bash; S3 blocks against the test server), and each block that
needs an earlier one says so in its first line. The docs site builds in mkdocs' strict mode."""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"
#: What a landing page may hold: the rest belongs in docs/.
README_MAX_LINES = 300
#: `<!-- readme-test skips this block: why -->` or `<!-- readme-test skips `line`, `line`: why -->`
#: on the line before a fence: the only way a Python or shell block escapes this test.
MARKER = re.compile(r"<!-- readme-test skips (this block|`[^`]+`(?:, `[^`]+`)*): (.+?) -->")
RUN = ("python", "bash")
#: What the README and the docs may skip, by the block's first command: services that run until stopped, and the suite itself.
SKIPPED = {"make test", "make deploy-local", "dagster code-server start", "curl -s -X POST"}


@dataclass(frozen=True)
class Block:
    page: str  # the file, relative to the repository root
    lang: str
    code: str
    line: int  # 1-based line of the opening fence
    skip_block: str | None  # the marker's reason, when the whole block is skipped
    skip_lines: tuple[str, ...]  # lines (by their start) left out of the run

    def runnable_code(self) -> str:
        return "".join(
            line for line in self.code.splitlines(keepends=True) if not any(line.startswith(s) for s in self.skip_lines)
        )

    def first_command(self) -> str:
        return next(line for line in self.code.splitlines() if line.strip() and not line.startswith("#"))

    def where(self) -> str:
        return f"{self.page} line {self.line}"


def nav_pages() -> list[Path]:
    """The docs pages in the order of mkdocs.yml's nav."""

    def walk(items: list[object]) -> list[Path]:
        pages: list[Path] = []
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            pages += walk(value) if isinstance(value, list) else [DOCS / str(value)]
        return pages

    return walk(yaml.safe_load(MKDOCS.read_text())["nav"])


def pages() -> list[Path]:
    """README first, then the docs pages: the order their blocks run in."""
    return [README, *nav_pages()]


def all_blocks() -> list[Block]:
    return [b for page in pages() for b in readme_blocks(page.read_text(), page)]


def readme_blocks(text: str | None = None, page: Path = README) -> list[Block]:
    """Every fenced block of a page (the README unless given), in order, with the skip marker on the line before it."""
    lines = (page.read_text() if text is None else text).splitlines(keepends=True)
    name = str(page.relative_to(ROOT))
    blocks, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        start, lang = i, lines[i][3:].strip()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].rstrip("\n") == "```")
        marker = MARKER.search(lines[start - 1]) if start else None
        whole = marker is not None and marker.group(1) == "this block"
        skip_lines = tuple(re.findall(r"`([^`]+)`", marker.group(1))) if marker and not whole else ()
        blocks.append(
            Block(
                name, lang, "".join(lines[start + 1 : end]), start + 1, marker.group(2) if whole else None, skip_lines
            )
        )
        i = end + 1
    return blocks


def free_names(code: str) -> set[str]:
    """Names a Python block reads that it neither assigns, imports nor defines (nor are builtins)."""
    bound, used = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return used - bound - set(dir(builtins))


#: Paths a shell block can only find after an earlier block (or `make demo`) made them.
EARLIER_PATHS = ("readme-example/", ".demo/", ".dagster_home", "request.json", "approver.", "make deploy-local running")


def indented_blocks(text: str) -> list[int]:
    """Lines opening an indented (unfenced) code block: four spaces after a blank line, outside fences."""
    lines, fenced, out = text.splitlines(), False, []
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("    ") and i and not lines[i - 1].strip():
            out.append(i + 1)
    return out


def test_every_block_declares_its_language_and_what_it_needs() -> None:
    blocks = all_blocks()
    assert all(b.lang for b in blocks), [
        b.where() for b in blocks if not b.lang
    ]  # no untagged block hides from the run
    assert {str(p): indented_blocks(p.read_text()) for p in pages()} == {
        str(p): [] for p in pages()
    }  # nor an indented one
    for b in blocks:
        first = b.code.splitlines()[0]
        if b.lang == "python" and free_names(b.code):
            assert first.startswith("# needs: "), f"{b.where()}: uses {sorted(free_names(b.code))}, says not"
        if b.lang == "bash" and any(p in b.code for p in EARLIER_PATHS):
            assert first.startswith("# needs: "), f"{b.where()}: needs an earlier block, says not"


def test_the_nav_holds_every_docs_page_once() -> None:
    """A page left out of the nav would escape both the site and this run."""
    nav = nav_pages()
    assert len(nav) == len(set(nav))
    assert sorted(nav) == sorted(DOCS.rglob("*.md"))


def test_the_readme_is_a_landing_page_whose_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < README_MAX_LINES
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert local and all((ROOT / link).is_file() for link in local), [
        link for link in local if not (ROOT / link).is_file()
    ]
    assert {ROOT / link for link in local} <= {README, *nav_pages()}  # pages of the site, not stray files
    assert {p for p in nav_pages() if "reference" not in p.parts and p.name != "index.md"} <= {
        ROOT / link for link in local
    }


def test_the_docs_build_strictly(tmp_path) -> None:
    """`make docs`: mkdocs in strict mode, so a broken link or an API reference that does not resolve fails here."""
    out = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "WARNING" not in out.stderr, out.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "approval" / "index.html").read_text().count("doc-heading") > 10


def test_the_skipped_blocks_are_few_and_named() -> None:
    blocks = all_blocks()
    skipped = {b.first_command() for b in blocks if b.skip_block} | {s for b in blocks for s in b.skip_lines}
    assert {next(s for s in SKIPPED if c.startswith(s)) for c in skipped} == SKIPPED
    assert len(skipped) == len(SKIPPED)
    assert all(b.lang in RUN for b in blocks if b.skip_block or b.skip_lines)


def test_the_curl_launch_body_is_json_holding_a_launch_run_mutation() -> None:
    from graphql import parse

    (curl,) = [b for b in all_blocks() if b.lang == "bash" and "curl " in b.code]
    words = shlex.split(curl.runnable_code().split("\n", 1)[1])
    query = json.loads(words[words.index("-d") + 1])["query"]
    (op,) = parse(query).definitions
    assert op.operation.value == "mutation" and op.selection_set.selections[0].name.value == "launchRun"


def test_the_request_file_shown_is_an_approval_request() -> None:
    from trainvault import ApprovalRequest

    (shown,) = [json.loads(b.code) for b in all_blocks() if b.lang == "json" and "approval-request" in b.code]
    assert set(shown) == set(ApprovalRequest.model_fields)
    assert shown["format"] == ApprovalRequest.KIND and shown["version"] == 1


def test_a_marker_skips_only_what_it_names() -> None:
    text = (
        "<!-- readme-test skips `make b`: why -->\n```bash\nmake a\nmake b\n```\n"
        "<!-- readme-test skips this block: services -->\n```bash\nmake c\n```\n```python\nx = 1\n```\n"
    )
    a, c, py = readme_blocks(text)
    assert (a.runnable_code(), a.skip_block, c.skip_block, py.skip_block) == ("make a\n", None, "services", None)
    assert free_names("import os\nx = os.sep + y\n[z for z in w]\n") == {"y", "w"}
    assert indented_blocks("text\n\n    code\n\n```\n\n    fenced\n```\n- item\n  more\n") == [3]


SHELL = '''
import subprocess as _subprocess
import sys as _sys


def _readme_shell(n, code):
    """A README or docs shell block, run with bash (-e: its first failing line fails it); output to readme-shell-<n>.out."""
    _sys.stdout.flush()
    with open(f"readme-shell-{n}.out", "w") as out:
        done = _subprocess.run(["bash", "-euo", "pipefail", "-c", code], stdout=out, stderr=_subprocess.STDOUT)
    if done.returncode:
        output = open(f"readme-shell-{n}.out").read()
        raise SystemExit(f"shell block {n} exited {done.returncode}: {output[-3000:]}")
'''


def readme_program(blocks: list[Block]) -> tuple[str, list[int]]:
    """One Python program: Python blocks as written, shell blocks through `_readme_shell`; and the shell blocks' numbers.

    Each block starts with a comment naming where it comes from, so a traceback points at the page."""
    parts, shells = [SHELL], []
    for n, b in enumerate(blocks):
        if b.skip_block or b.lang not in RUN:
            continue
        parts.append(f"# {b.where()}\n")
        if b.lang == "python":
            parts.append(b.runnable_code())
        else:
            parts.append(f"_readme_shell({n}, {b.runnable_code()!r})\n")
            shells.append(n)
    return "\n\n".join(parts), shells


def repository_copy(dest: Path) -> Path:
    """The repository's files (tracked and new, not ignored) under `dest`, with its installed venv linked in."""
    stamp = ROOT / ".venv" / ".installed"
    if not stamp.exists():
        pytest.fail(f"{stamp} is missing: run `make venv` first (the README's make lines would build a venv)")
    names = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, names):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    # A copy's pyproject.toml is newer than the venv's stamp: make would reinstall into the shared venv.
    before = stamp.stat().st_mtime - 1
    os.utime(dest / "pyproject.toml", (before, before))
    return dest


def test_readme_and_docs_blocks_run_as_written_in_order(
    tmp_path, s3_server, s3_bucket, s3_key_id: str, s3_secret: str, monkeypatch
) -> None:
    repo = repository_copy(tmp_path / "repo")
    blocks = all_blocks()
    program, shells = readme_program(blocks)
    (repo / "readme_blocks.py").write_text(program)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINVAULT_", "DAGSTER_"))}
    env.update(
        {
            "PYTHONPATH": str(repo),
            "TRAINVAULT_S3_URL": s3_server,
            "TRAINVAULT_S3_REGION": "us-east-1",
            "TRAINVAULT_S3_KEY_ID": s3_key_id,
            "TRAINVAULT_S3_SECRET": s3_secret,
            "TRAINVAULT_S3_BUCKET": s3_bucket,
            # Every Dagster step in one process: the same job and assets, without a process per step.
            "TRAINVAULT_DEMO_EXECUTOR": "in_process",
            "TRAINVAULT_EXECUTOR": "in_process",
            "HOME": str(tmp_path / "home"),  # a Dagster CLI line without DAGSTER_HOME would leave ~/.dagster here
        }
    )
    out = subprocess.run(
        [str(repo / ".venv" / "bin" / "python"), "readme_blocks.py"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "9600"  # the tour's pool example: train records
    uri, digest = lines[1].split()  # the tour's signed approval
    assert uri.endswith("/readme-example/dataset/approval-v1.dsse.json") and len(digest) == 64
    assert lines[2] == "3200"  # every easy record through the approved loader
    assert lines[3] == "3200 3200"  # the Hugging Face Trainer, killed and resumed: every easy record once
    assert lines[4].startswith("epoch 0, position 3,200/9,600")  # docs/loading.md: describe_state() after resuming
    assert lines[5] == "9600"  # before and after the interruption: every record once
    assert lines[6] == uri.replace("approval-v1.dsse.json", "croissant.json")  # the card the CLI wrote, same options
    assert lines[7] == "16"  # docs/components.md: one range per document, two documents in each of 8 packed records
    assert len(lines) == 8
    assert (repo / "readme-example" / "dataset" / "data-manifest-v1.json").exists()

    shell = {blocks[n].first_command(): (repo / f"readme-shell-{n}.out").read_text() for n in shells}
    demo = next(v for k, v in shell.items() if k.startswith("make demo "))
    assert "steps done; running " in demo and "\nnext:\n  make ui " in demo
    assert "\n  .venv/bin/trainvault trace file://" in demo.split("\nnext:\n")[1]
    approve = next(
        v for k, v in shell.items() if k.startswith(".venv/bin/trainvault approve readme-example/request.json")
    )
    assert "approval " in approve and "approval-cli.dsse.json" in approve
    trace = next(v for k, v in shell.items() if k.startswith("approval=$(ls -t .demo/store/demo_curriculum"))
    trace_lines = [line for line in trace.splitlines() if not line.startswith("trainvault: ")]  # stderr's progress
    assert trace_lines[0] == "step 0 rank 0 epoch 0: 8 records" and len(trace_lines) == 9
    assert trace_lines[1].startswith('train\teasy/0\t0\t"train-easy-0-00000"\t{')

    # The Dagster CLI lines wrote to the project's instance (the one `make ui` serves), not ~/.dagster.
    assert not (tmp_path / "home" / ".dagster").exists()
    monkeypatch.setenv("DAGSTER_HOME", str(repo / ".dagster_home"))
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        jobs = [r.job_name for r in instance.get_runs()]
    assert jobs.count("lifecycle_demo_text") == 2 and jobs.count("lifecycle_demo_curriculum") == 1 and len(jobs) == 4


def test_the_docs_name_one_set_of_s3_variables() -> None:
    from trainvault.storage import S3_ENV_VARS

    cli, storage = (DOCS / "cli.md").read_text(), (DOCS / "storage.md").read_text()
    for variable in S3_ENV_VARS.values():
        assert f"`{variable}`" in cli and f"| `{variable}` |" in storage
    for page in pages():
        assert not re.search(
            r"TRAINVAULT_S3_ENDPOINT|AWS_ENDPOINT_URL|AWS_ACCESS_KEY_ID|AWS_SECRET_ACCESS_KEY", page.read_text()
        ), page


def repl_errors(code: str) -> list[str]:
    """What a Python REPL says when `code` is pasted into it line by line (nothing is run): a
    compound statement ends at a blank line there, so a statement right after one fails."""
    import codeop

    errors, buffer = [], []
    for n, line in enumerate([*code.splitlines(), ""], start=1):
        buffer.append(line)
        try:
            done = codeop.compile_command("\n".join(buffer), symbol="single")
        except SyntaxError as exc:
            errors.append(f"line {n}: {exc.msg}")
            buffer = []
            continue
        if done is not None or (not line.strip() and len(buffer) == 1):
            buffer = []
    return errors


@pytest.mark.parametrize("block", [b for b in readme_blocks() if b.lang == "python"], ids=lambda b: b.where())
def test_readme_python_pastes_into_a_repl(block: Block) -> None:
    assert repl_errors(block.code) == []


def test_repl_paste_check_finds_a_statement_after_an_unended_block() -> None:
    assert repl_errors("if True:\n    x = 1\ny = 2\n") and not repl_errors("if True:\n    x = 1\n\ny = 2\n")


def test_readmes_approval_is_one_short_block() -> None:
    text = README.read_text()
    section = text[text.index("### 2. Check and approve") : text.index("### 3. Train")]
    (block,) = [b for b in readme_blocks(section) if b.lang == "python"]
    lines = block.code.splitlines()
    imports = [line for line in lines if line.startswith(("import ", "from "))]
    assert len(lines) <= 15 and len(imports) <= 3, (len(lines), imports)


def test_the_tour_leaves_its_keys_and_files_in_an_ignored_folder() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "readme-example/" in ignored
    written = []
    for b in all_blocks():
        if b.lang == "python":
            written += re.findall(r"write_keypair\(\"([^\"]+)\"", b.code)
            written += re.findall(r"Path\(\"([^\"]+)\"\)\.write_", b.code)
    assert written and all(p.startswith("readme-example/") for p in written), written
