"""The ``trainvault`` command: inspect a manifest, generate keys, exclude contaminated records,
approve, verify an approval, export it as an OpenSSF Model Signing signature, write its Croissant
card, trace the records of a training step, read a split through the training loader.

S3 settings come from ``TRAINVAULT_S3_URL``, ``TRAINVAULT_S3_REGION``, ``TRAINVAULT_S3_KEY_ID`` and
``TRAINVAULT_S3_SECRET`` (`StorageConfig.from_env`). Failures end with one line,
``trainvault: error: ...``, and exit with status 1; ``inspect`` exits 3 when shard entries do
not match their completion descriptors. Waits of more than a second are announced on stderr.
Output into a pipe that closes early (``| head``) ends the command quietly with status 141,
as a command killed by SIGPIPE does.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence
from typing import Any

from trainvault.cli.amendments import add_amendment_parsers
from trainvault.cli.approval import add_approval_parsers
from trainvault.cli.console import announcing_storage_waits, vault_from_env
from trainvault.cli.inspect import add_inspect_parser
from trainvault.cli.oms import add_oms_parsers
from trainvault.cli.read import add_read_parser
from trainvault.cli.recognize import Takes, reads, wrong_document
from trainvault.cli.trace import add_trace_parser
from trainvault.errors import TrainVaultError, WrongDocumentError
from trainvault.version import __version__

__all__ = []

#: The reader of the output went away (``| head``): 128 + SIGPIPE, what a shell reports for such a command.
EXIT_BROKEN_PIPE = 141


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), naming the command closest to a mistyped one."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse would say only "invalid choice" and list every command.
        if not isinstance(action, argparse._SubParsersAction) or value in action.choices:
            super()._check_value(action, value)
            return
        close = difflib.get_close_matches(value, list(action.choices), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the commands: {', '.join(action.choices)}"
        raise argparse.ArgumentError(None, f"unknown command {value!r}; {hint}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="trainvault", description="Custody chain for model-training data.")
    parser.add_argument("--version", action="version", version=f"trainvault {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_inspect_parser(sub)
    add_approval_parsers(sub)
    add_amendment_parsers(sub)
    add_oms_parsers(sub)
    add_trace_parser(sub)
    add_read_parser(sub)
    add_archive_commands(sub)
    return parser


def add_archive_commands(sub: Any) -> None:
    """``trainvault archive inspect URI`` and ``trainvault archive gc POOL --grace ... [--dry-run]``."""
    from trainvault.rollouts.cli import add_archive_parser

    parsers = add_archive_parser(sub, vault_from_env)
    parsers["inspect"].set_defaults(takes=reads(Takes("archive inspect", "uri", ("archive-index",))))


def _run(args: argparse.Namespace) -> int:
    """The command; when it fails on a file of a kind it does not read there (a data manifest
    given to ``verify``), a `WrongDocumentError` says what the file is and which command reads it."""
    try:
        return int(args.run(args))
    except TrainVaultError as exc:
        explained = wrong_document(args, exc, lambda: vault_from_env().storage)
        if explained is None:
            raise
        raise WrongDocumentError(explained) from exc


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with announcing_storage_waits():
            code = _run(args)
            sys.stdout.flush()  # here, so a closed pipe is met inside the handlers below
            return code
    except BrokenPipeError:
        # Nothing more can be written; point stdout at /dev/null so the interpreter's own final
        # flush does not report the closed pipe either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except (TrainVaultError, OSError) as exc:  # OSError: a local file the command was pointed at
        message = " ".join(str(exc).split())  # one line, whatever the error held
        print(f"trainvault: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("trainvault: interrupted", file=sys.stderr)
        return 130
