"""Options several commands share, defined once so they parse and mean the same everywhere."""

from __future__ import annotations

import argparse


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
