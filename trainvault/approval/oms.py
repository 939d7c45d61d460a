"""An OpenSSF Model Signing (OMS v1.0) signature of an approved dataset, from its approval's digests.

The signed directory is the dataset's own folder: the folder of its data manifest, as it lies
on a local disk or as a copy of its storage prefix gives it. Its resources are the files the
approval binds that lie in that folder, each by its path there and the SHA-256 the approval
already holds: the manifest, every shard and completion descriptor, the descriptor pack, the
documents the request binds (and the evaluation release's item files), the approval record.
No data byte is read: only a listing of the folder, which must hold exactly these files at
their approved sizes (`model_signing verify` refuses any other file). The statement is an
in-toto Statement v1 of predicate type ``https://model_signing/signature/v1.0`` in a DSSE
envelope signed with an ECDSA key, inside a Sigstore bundle: one bundle per signer.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from trainvault.approval.approved import ApprovalRecordRef, ApprovedDataset
from trainvault.approval.dsse import IN_TOTO_PAYLOAD_TYPE, STATEMENT_TYPE, pae
from trainvault.approval.ecdsa import EcdsaSigningKey, load_ecdsa_signing_key
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.contamination.release import EvaluationRelease
from trainvault.errors import ApprovalError
from trainvault.publication.bound import read_document
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage.store import Storage, StorageSource, storage_of
from trainvault.uris import is_within, join_uri, normalize_uri, parent_uri, parse_uri, resolve_uri

OMS_PREDICATE_TYPE = "https://model_signing/signature/v1.0"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
#: What `model_signing` leaves out of every directory it hashes unless told otherwise.
GIT_PATHS = (".git", ".gitattributes", ".github", ".gitignore")
#: The folder of the default signatures, beside the approval record (ignored when it lies in the
#: signed folder, so every signer's bundle can sit there).
SIGNATURES_FOLDER = "oms"


class OmsResource(NamedTuple):
    """One file of the signed folder: its POSIX path there, SHA-256, and size when the approval binds one."""

    name: str
    sha256: str
    size: int | None


@dataclass(frozen=True)
class WrittenOms(Referenced):
    """An OMS signature as written: the bundle's reference, the folder it signs, the statement's
    subject digest, how many files it lists, and the bound files outside the folder (not covered)."""

    root: str
    subject_sha256: str
    files: int
    not_covered: tuple[str, ...]


#: A bound file's SHA-256, and its size when the approval binds one.
Digest = tuple[str, int | None]


def bound_files(storage: Storage, approved: ApprovedDataset) -> dict[str, Digest]:
    """Every file the approval binds, by (normalized) URI, with the digest and size it binds."""
    record = _record(approved)
    publication = approved._result.publication
    out: dict[str, Digest] = {approved.manifest_uri: (approved.manifest_sha256, approved.manifest_size)}
    # Entry URIs are resolved and normalized already (`Publication`): 20,000 of them at 10,000 shards.
    for _, e in publication.entries():
        out[e.uri] = (e.sha256, e.size_bytes)
        out[e.descriptor_uri] = (e.descriptor_sha256, None)
    few = list(approved.bindings.values())
    if publication.manifest.descriptor_pack is not None:
        few.append(publication.manifest.descriptor_pack)
    few += _release_items(storage, approved.bindings["evaluation_release"])
    few.append(record.ref)
    for ref in few:
        uri = normalize_uri(ref.uri)
        known = out.get(uri)
        if known is not None and known[0] != ref.sha256:
            raise ApprovalError(
                f"{uri} is bound twice, as {known[0]} and {ref.sha256}; the approval is inconsistent: re-approve"
            )
        out[uri] = (ref.sha256, ref.size if known is None or ref.size is not None else known[1])
    return out


def _record(approved: ApprovedDataset) -> ApprovalRecordRef:
    if approved.approval is None:
        raise ApprovalError(
            f"{approved.manifest_uri}: approved in this process, not opened from a signed record; the OMS "
            "signature lists the approval record: write_approval, then open_approved it and export that"
        )
    return approved.approval


def _release_items(storage: Storage, release: ObjectRef) -> list[ObjectRef]:
    """The item files the bound evaluation release binds (its one document read, pinned by digest)."""
    bound = read_document(storage, EvaluationRelease, release.uri, sha256=release.sha256)
    base = parent_uri(bound.uri)
    return [
        ObjectRef(
            uri=resolve_uri(b.items.uri, base, absolute="anywhere", where=f"{bound.uri} (benchmark {b.name!r})"),
            sha256=b.items.sha256,
            size=b.items.size_bytes,
        )
        for b in bound.document.benchmarks
    ]


def _prefix(root: str) -> str:
    """What every normalized URI inside the folder `root` starts with: the rest is its path there."""
    return join_uri(root, "x")[:-1]


def _skipper(ignore_paths: Iterable[str]) -> Callable[[str], bool]:
    """Whether a path is one `model_signing` skips: an ignored path or anything under it."""
    exact = frozenset(ignore_paths)
    under = tuple(p + "/" for p in exact)
    return lambda name: name in exact or name.startswith(under)


def oms_resources(
    files: Mapping[str, Digest], root: str, ignore_paths: Iterable[str]
) -> tuple[list[OmsResource], list[str]]:
    """The files under the folder `root`, by path there in the verifier's order (path segments
    compared by code point), and the URIs of those outside it. A bound file under an ignored
    path is refused: the verifier would skip it."""
    skipped, prefix = _skipper(ignore_paths), _prefix(root)
    inside, outside = [], []
    for uri, (sha256, size) in files.items():
        if not uri.startswith(prefix):
            outside.append(uri)
            continue
        name = uri[len(prefix) :]
        if skipped(name):
            raise ApprovalError(
                f"{uri}: a bound file under {name.split('/')[0]!r}, a path model_signing skips; it would not be "
                "covered: write the OMS signature elsewhere (--out) or keep bound files out of that path"
            )
        inside.append(OmsResource(name, sha256, size))
    # NUL sorts below every other character: by code point on the whole name, it orders as the segments.
    inside.sort(key=lambda r: r.name.replace("/", "\0"))
    return inside, sorted(outside)


def check_folder(storage: Storage, root: str, resources: list[OmsResource], ignore_paths: Iterable[str]) -> None:
    """The folder holds exactly `resources` (beside ignored paths), each at its bound size: one listing."""
    skipped, prefix = _skipper(ignore_paths), _prefix(root)
    listed = {o.uri[len(prefix) :]: o.size for o in storage.list(root)}
    names = {r.name for r in resources}
    extra = sorted(n for n in listed if n not in names and not skipped(n))
    if extra:
        raise ApprovalError(
            f"{root} holds {len(extra)} file(s) the approval does not bind ({', '.join(extra[:5])}"
            f"{', ...' if len(extra) > 5 else ''}): model_signing would refuse the folder; move them out of it"
        )
    for r in resources:
        size = listed.get(r.name)
        if size is None or (r.size is not None and size != r.size):
            found = "is missing" if size is None else f"is {size} bytes, approved at {r.size} bytes"
            raise ApprovalError(
                f"{join_uri(root, r.name)} {found}: the folder is not the approved dataset; restore it (or "
                "copy it again) before exporting"
            )


def oms_statement(name: str, resources: list[OmsResource], ignore_paths: Iterable[str]) -> dict[str, Any]:
    """The OMS v1.0 statement: the subject digest is SHA-256 over the raw resource digests in order."""
    root = hashlib.sha256(b"".join(bytes.fromhex(r.sha256) for r in resources)).hexdigest()
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": root}}],
        "predicateType": OMS_PREDICATE_TYPE,
        "predicate": {
            "serialization": {
                "method": "files",
                "hash_type": "sha256",
                "allow_symlinks": False,
                "ignore_paths": sorted(ignore_paths),
            },
            "resources": [{"name": r.name, "algorithm": "sha256", "digest": r.sha256} for r in resources],
        },
    }


def oms_bundle(payload: bytes, key: EcdsaSigningKey) -> bytes:
    """A Sigstore bundle (v0.3) over `payload` in a DSSE envelope: one signature, the key's hint,
    no transparency-log entry (a key signature)."""
    sig = key.sign(pae(IN_TOTO_PAYLOAD_TYPE, payload))
    return canonical_json(
        {
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {"publicKey": {"hint": key.hint}, "tlogEntries": []},
            "dsseEnvelope": {
                "payload": base64.b64encode(payload).decode("ascii"),
                "payloadType": IN_TOTO_PAYLOAD_TYPE,
                "signatures": [{"sig": base64.b64encode(sig).decode("ascii"), "keyid": ""}],
            },
        }
    )


def default_oms_uri(approval_uri: str, key: EcdsaSigningKey) -> str:
    """``oms/<record name>.<key hint>.sigstore.json`` beside the approval record: one per signer."""
    stem = os.path.basename(parse_uri(approval_uri).path).removesuffix(".json").removesuffix(".dsse")
    return join_uri(parent_uri(approval_uri), SIGNATURES_FOLDER, f"{stem}.{key.hint[:16]}.sigstore.json")


def _ignore_paths(root: str, out: str) -> list[str]:
    """The git paths, and the signature's own place when it lies in the signed folder."""
    if not is_within(out, root):
        return list(GIT_PATHS)
    name = out[len(_prefix(root)) :]
    return [*GIT_PATHS, SIGNATURES_FOLDER if name.startswith(SIGNATURES_FOLDER + "/") else name]


def export_oms(
    storage: StorageSource,
    approved: ApprovedDataset,
    signing_key: EcdsaSigningKey | str | os.PathLike[str] | bytes,
    out: str | None = None,
) -> WrittenOms:
    """Write (create-only) the OMS signature of `approved` (opened from its signed record) to
    `out` (default: `default_oms_uri`), signed with an ECDSA `signing_key`. The signature is
    deterministic, so the same export again writes nothing; another at `out` is a `ConflictError`.
    The folder of the data manifest must hold exactly the bound files at their sizes (`ApprovalError`
    naming what differs); bound files outside it are listed in ``not_covered``."""
    if not isinstance(approved, ApprovedDataset):
        raise ApprovalError(f"export_oms signs an opened ApprovedDataset, not a {type(approved).__name__}")
    key = load_ecdsa_signing_key(signing_key)
    store = storage_of(storage)
    root = parent_uri(approved.manifest_uri)
    out_uri = normalize_uri(out) if out is not None else default_oms_uri(_record(approved).uri, key)
    ignore = _ignore_paths(root, out_uri)
    resources, outside = oms_resources(bound_files(store, approved), root, ignore)
    check_folder(store, root, resources, ignore)
    statement = oms_statement(os.path.basename(parse_uri(root).path.rstrip("/")), resources, ignore)
    data = oms_bundle(canonical_json(statement), key)
    store.put_create(out_uri, data)
    return WrittenOms(
        ObjectRef(uri=out_uri, sha256=sha256_hex(data), size=len(data)),
        root,
        statement["subject"][0]["digest"]["sha256"],
        len(resources),
        tuple(outside),
    )
