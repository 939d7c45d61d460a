"""Options several commands share, defined once so they parse and mean the same everywhere."""

from __future__ import annotations

import argparse
from typing import Any

from trainvault.errors import TrainVaultError


def add_stage_option(p: argparse.ArgumentParser, when: str = "") -> None:
    """``--stage S``, repeatable, into ``args.stage``: None (the whole split) or the list of stages,
    the loader's ``curriculum_stages`` (their union, each shard once, in the order given)."""
    p.add_argument(
        "--stage",
        action="append",
        metavar="STAGE",
        help=f"{when}a curriculum stage (repeatable: the union of the stages, in the order given; "
        "default: the whole split)",
    )


def add_amendment_options(p: argparse.ArgumentParser) -> None:
    """``--amendments PREFIX`` or ``--amendment FILE`` (repeatable), and ``--max-removed N/D``."""
    p.add_argument("--amendments", metavar="PREFIX", help="open the amended view: the amendments under PREFIX")
    p.add_argument("--amendment", action="append", metavar="FILE", help="an amendment file (repeatable)")
    p.add_argument("--max-removed", metavar="N/D", help="largest fraction of records amendments remove (default 1/100)")


def amendment_source(args: argparse.Namespace) -> Any:
    """The amendment source ``--amendments PREFIX`` or ``--amendment FILE`` names (None: neither)."""
    prefix, files = getattr(args, "amendments", None), getattr(args, "amendment", None)
    if prefix and files:
        raise TrainVaultError("pass --amendments PREFIX or --amendment FILE, not both")
    return prefix or files or None


def max_removed(args: argparse.Namespace) -> tuple[int, int]:
    """``--max-removed N/D`` as a fraction (default 1/100); its range is the library's to check."""
    text = getattr(args, "max_removed", None)
    if text is None:
        return (1, 100)
    n, sep, d = text.partition("/")
    try:
        return int(n), int(d) if sep else 1
    except ValueError:
        raise TrainVaultError(f"--max-removed takes N/D (whole numbers), got {text!r}") from None
