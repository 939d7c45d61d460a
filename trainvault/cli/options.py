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
    """``--amendments PREFIX`` or ``--amendment FILE`` (repeatable); how much they may take down is
    the policy's ``--max-removed N/D``."""
    p.add_argument("--amendments", metavar="PREFIX", help="open the amended view: the amendments under PREFIX")
    p.add_argument("--amendment", action="append", metavar="FILE", help="an amendment file (repeatable)")


def amendment_source(args: argparse.Namespace) -> Any:
    """The amendment source ``--amendments PREFIX`` or ``--amendment FILE`` names (None: neither)."""
    prefix, files = getattr(args, "amendments", None), getattr(args, "amendment", None)
    if prefix and files:
        raise TrainVaultError("pass --amendments PREFIX or --amendment FILE, not both")
    return prefix or files or None
