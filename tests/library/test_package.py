"""The public surface: every exported name resolves, and none pulls a heavy dependency."""

from __future__ import annotations

import subprocess
import sys


def test_every_public_name_resolves_without_heavy_imports() -> None:
    code = (
        "import sys, trainvault\n"
        "missing = [n for n in trainvault.__all__ if getattr(trainvault, n, None) is None]\n"
        "heavy = [m for m in ('dagster', 'torch', 'pyarrow', 'safetensors', 'numpy') if m in sys.modules]\n"
        "print(missing, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []"


def test_unknown_name_is_an_attribute_error() -> None:
    import pytest

    import trainvault

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        trainvault.nope  # noqa: B018


# -- the public surface a newcomer holds ------------------------------------------------

import ast  # noqa: E402
import importlib  # noqa: E402
import pkgutil  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import trainvault  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
#: The most names the packages export together (each counted once).
MAX_PUBLIC_NAMES = 120


def public_modules() -> list[str]:
    """trainvault and each of its packages: what a user imports names from."""
    return ["trainvault"] + [f"trainvault.{m.name}" for m in pkgutil.iter_modules(trainvault.__path__) if m.ispkg]


def exported() -> dict[str, set[str]]:
    return {m: set(importlib.import_module(m).__all__) for m in public_modules()}


def test_the_public_surface_stays_small() -> None:
    names = set().union(*exported().values())
    assert len(names) <= MAX_PUBLIC_NAMES, f"{len(names)} public names: {sorted(names)}"


def test_every_exported_name_resolves_in_its_package() -> None:
    for module, names in exported().items():
        package = importlib.import_module(module)
        assert [n for n in sorted(names) if not hasattr(package, n)] == [], module


def test_every_exported_name_has_an_api_reference_page() -> None:
    pages = "".join(p.read_text() for p in (REPO / "docs" / "reference").glob("*.md"))
    documented = set(re.findall(r"^::: (trainvault[\w.]*)", pages, re.M))
    assert [m for m in public_modules() if exported()[m] and m not in documented] == []


def imports_of(code: str) -> list[tuple[str, str]]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [
        (n.module, a.name)
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("trainvault")
        for a in n.names
    ]


def off_surface(code: str) -> list[str]:
    """The trainvault names `code` imports from anywhere but a package that exports them."""
    surface = exported()
    return [f"{m}.{n}" for m, n in imports_of(code) if n not in surface.get(m, set())]


def test_readme_and_docs_use_only_package_level_names() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found = {
        str(p.relative_to(REPO)): bad
        for p in pages
        for bad in [
            [x for block in re.findall(r"```python\n(.*?)```", p.read_text(), re.S) for x in off_surface(block)]
        ]
        if bad
    }
    assert found == {}


#: What the code location still takes from inside a package (a ratchet: the list only shrinks).
LOCATION_INTERNALS = {
    "trainvault.approval.policy.is_field_path",
    "trainvault.canonical.canonical_json",
    "trainvault.canonical.sha256_hex",
    "trainvault.contamination.exclusions.truncated_items",
    "trainvault.documents.Document",
    "trainvault.documents.describe_validation_error",
    "trainvault.uris.join_uri",
    "trainvault.uris.normalize_uri",
}


def test_the_code_location_uses_package_level_names() -> None:
    files = [p for d in ("assets", "resources", "pipelines") for p in sorted((REPO / d).rglob("*.py"))]
    found = {x for p in files for x in off_surface(p.read_text())}
    assert found <= LOCATION_INTERNALS, sorted(found - LOCATION_INTERNALS)
