"""``trainvault oms-export``: an OpenSSF Model Signing signature of a verified approval."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from trainvault.cli.approval import add_approval_arguments, open_verified
from trainvault.cli.console import vault_from_env
from trainvault.cli.recognize import Takes, reads


def cmd_oms_export(args: argparse.Namespace) -> int:
    from trainvault.approval.oms import export_oms
    from trainvault.uris import parse_uri

    vault = vault_from_env()
    approved = open_verified(vault, args)
    written = export_oms(vault, approved, args.signing_key, args.out)
    print(f"oms signature {written.uri}")
    print(f"sha256        {written.sha256}")
    print(f"signs         {written.root}: {written.files} files, subject sha256 {written.subject_sha256}")
    for uri in written.not_covered:
        print(f"not covered   {uri} (bound by the approval, outside the signed folder)")
    if parse_uri(written.root).scheme == "file":
        folder, sig = parse_uri(written.root).path, parse_uri(written.uri).path
        command = ["model_signing", "verify", "key", f"/{folder}", "--signature", f"/{sig}"]
        print("verify with   " + shlex.join([*command, "--public_key", "PUBLIC_KEY.pub"]))
    return 0


def add_oms_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "oms-export",
        help="verify an approval, then sign its dataset's folder as an OpenSSF Model Signing bundle "
        "(from the digests the approval binds; no data is read)",
    )
    add_approval_arguments(p)
    p.add_argument(
        "--signing-key", required=True, help="ECDSA private key file (`trainvault keygen --type ecdsa-p256`)"
    )
    p.add_argument(
        "--out", help="URI or path of the bundle (default: oms/<record>.<key hint>.sigstore.json beside the approval)"
    )
    p.set_defaults(run=cmd_oms_export, takes=reads(Takes("oms-export", "approval", ("approval-record",))))
