"""A Croissant card (JSON-LD, Croissant 1.1) for an approved dataset.

The card describes exactly what the approval lets a trainer read: every shard as a
``cr:FileObject`` (sha256, size, encoding format); a shard the approval excludes records of
as a clean copy without them (`trainvault.cards.approved_view`), so no Croissant reader gets
an excluded record; a ``cr:FileSet`` per split listing exactly those files (no glob that a
file added later could match), a ``cr:RecordSet`` per split whose fields are read from the
approved records themselves (every block verified, through the approval's custody),
the split's stages, curricula and bound profile, and the approval record and data manifest
as file objects with their sha256. Croissant has no terms for custody, curricula or
statistics; those are in the ``tv:`` namespace as JSON literals.

Shard URLs are relative to the card's folder when the card is on the same store, so
``mlcroissant`` reads the records of a local publication from a card written in its root.
"""

from __future__ import annotations

import datetime
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from trainvault.approval.approved import ApprovalRecordRef, ApprovedDataset
from trainvault.approval.result import VerificationSummary
from trainvault.canonical import sha256_hex
from trainvault.cards.approved_view import Survey, ViewShard, approved_rows, excluded_by_shard, view_shards
from trainvault.cards.fields import FieldSurvey, merge_surveys, survey_fields
from trainvault.errors import ApprovalError, ConfigurationError, IntegrityError, ManifestError
from trainvault.profile.sidecar import read_metrics_sidecar, sidecar_name
from trainvault.publication.manifest import DataManifest, ShardEntry
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import join_uri, normalize_uri, parent_uri, parse_uri

CARD_NAME = "croissant.json"
CONFORMS_TO = "http://mlcommons.org/croissant/1.1"
TV = "https://trainvault.invalid/croissant/"
#: The Croissant 1.1 context, plus the trainvault terms (JSON literals).
CONTEXT: dict[str, Any] = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "arrayShape": "cr:arrayShape",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "containedIn": "cr:containedIn",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "description": {"@container": "@language"},
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "name": {"@container": "@language"},
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
    "tv": TV,
    "tv:approval": {"@type": "@json"},
    "tv:curricula": {"@type": "@json"},
    "tv:profile": {"@type": "@json"},
    "tv:stages": {"@type": "@json"},
}

#: Per data format: the encoding formats a file object declares, and what a reader must know.
ENCODINGS: dict[str, tuple[list[str], str]] = {
    "jsonl.gz": (
        ["application/jsonlines"],
        "JSON Lines compressed with gzip, one gzip member per block (zcat reads it)",
    ),
    "parquet": (["application/vnd.apache.parquet", "application/x-parquet"], "Parquet, one row group per block"),
    "msgpack.zst": (
        ["application/zstd"],
        "one Zstandard frame per block, each holding MessagePack records back to back; Croissant "
        "readers (mlcroissant) cannot decode it: read the records with trainvault",
    ),
}
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"


@dataclass(frozen=True)
class WrittenCard(Referenced):
    """A Croissant card as written: its reference (``.uri``, ``.sha256``)."""


def default_card_uri(approved: ApprovedDataset) -> str:
    """``croissant.json`` beside the approval record the dataset was opened from."""
    return join_uri(parent_uri(_record(approved).uri), CARD_NAME)


def dataset_name(manifest_uri: str) -> str:
    """A card's default dataset name: the folder the data manifest is published in (a manifest
    holds no name of its own; the saver writes it in the dataset's folder, beside the shards),
    else the bucket's name."""
    loc = parse_uri(manifest_uri)
    return posixpath.basename(posixpath.dirname(loc.path)) or loc.bucket or "dataset"


def _record(approved: ApprovedDataset) -> ApprovalRecordRef:
    if not isinstance(approved, ApprovedDataset):
        raise TypeError(f"a Croissant card describes an ApprovedDataset, not a {type(approved).__name__}")
    if approved.approval is None:
        raise ApprovalError(
            f"{approved.manifest_uri}: this dataset was approved in this process and has no signed record to cite; "
            "write_approval it, then open it with open_approved (as a trainer would) and make the card from that"
        )
    return approved.approval


def _url(uri: str, folder: str) -> str:
    """`uri` relative to the card's `folder` when both are on one store, else the absolute URI."""
    target, base = parse_uri(uri), parse_uri(folder)
    if (target.scheme, target.bucket) != (base.scheme, base.bucket):
        return target.uri
    return posixpath.relpath("/" + target.path, "/" + base.path if base.path else "/")


def _file_object(node_id: str, name: str, url: str, ref: ObjectRef, formats: list[str], note: str) -> dict[str, Any]:
    """A ``cr:FileObject``: every one states the sha256 and size of the bytes it names."""
    if ref.size is None:
        raise ManifestError(f"{ref.uri}: a card's file object needs the object's size; this is a trainvault bug")
    return {
        "@type": "cr:FileObject",
        "@id": node_id,
        "name": name,
        "description": note,
        "contentUrl": url,
        "contentSize": f"{ref.size} B",
        "encodingFormat": formats if len(formats) > 1 else formats[0],
        "sha256": ref.sha256,
    }


def _shard_id(split: str, entry: ShardEntry) -> str:
    return f"files/{split}/{entry.key}"


def _field(split: str, survey: FieldSurvey, records: int, parent: FieldSurvey | None = None) -> dict[str, Any]:
    """A ``cr:Field``; a mapping at the top level gets sub-fields, read by JSONPath from its column."""
    data_type, is_array = survey.data_type()
    prefix = f"{split}/{quote(parent.name, safe='')}" if parent else split
    out: dict[str, Any] = {"@type": "cr:Field", "@id": f"{prefix}/{quote(survey.name, safe='')}", "name": survey.name}
    note = survey.note(records, nested=parent is not None)
    if note:
        out["description"] = note
    if survey.is_record and parent is None:
        out["subField"] = [_field(split, child, survey.present, survey) for child in survey.children.values()]
        return out
    out["dataType"] = data_type or "sc:Text"
    if is_array:
        out["isArray"] = True
        out["arrayShape"] = survey.array_shape()
    if parent is not None and ('"' in survey.name or "\\" in survey.name):
        out["description"] = "; ".join(filter(None, [note, "JSONPath cannot name this key: no source"]))
    elif data_type is not None:
        source: dict[str, Any] = {"fileSet": {"@id": f"files/{split}/shards"}}
        source["extract"] = {"column": (parent or survey).name}
        if parent is not None:
            source["transform"] = {"jsonPath": f'"{survey.name}"'}
        out["source"] = source
    return out


def _split_survey(
    approved: ApprovedDataset,
    data_format: str,
    split: str,
    shards: list[ViewShard],
    shard_surveys: Mapping[str, Survey] | None,
) -> Survey:
    """The split's field survey over its approved view, in manifest order: each clean copy's from its
    writing, each other shard's from `shard_surveys` (by shard key); without them, read from every record."""
    if shard_surveys is None:
        custody = approved.custody_storage()
        excluded = excluded_by_shard(approved, split)
        return survey_fields(
            row
            for v in shards
            for row in approved_rows(custody, data_format, v.entry, excluded.get(v.entry.key, frozenset()))
        )
    parts = []
    for v in shards:
        part = v.survey if v.survey is not None else shard_surveys.get(v.entry.key)
        if part is None or part[1] != v.records:
            raise IntegrityError(
                f"shard {split}/{v.entry.key}: the field survey given counts "
                f"{'no survey' if part is None else f'{part[1]} records'}, the approved view {v.records}: "
                "survey every approved shard"
            )
        parts.append(part)
    return merge_surveys(parts)


def _split_nodes(
    storage: StorageSource,
    approved: ApprovedDataset,
    manifest: DataManifest,
    split: str,
    folder: str,
    shard_surveys: Mapping[str, Survey] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The split's file objects and file set (its approved view), and its record set."""
    formats, note = ENCODINGS.get(manifest.data_format, (["application/octet-stream"], manifest.data_format))
    shards = view_shards(storage, approved, split, folder)
    files = [_shard_object(split, v, folder, formats, note) for v in shards]
    # Empty shards are zero-byte objects that some readers (Parquet) refuse; they hold no records.
    filled = [f["contentUrl"] for f, v in zip(files, shards, strict=False) if v.records]
    if filled:
        files.append(
            {
                "@type": "cr:FileSet",
                "@id": f"files/{split}/shards",
                "name": f"{split} shards",
                "description": f"the {len(filled)} approved shards of split {split} that hold records, in manifest order "
                f"({len(shards) - len(filled)} empty shards are listed as file objects only)",
                "encodingFormat": formats if len(formats) > 1 else formats[0],
                "includes": filled,
            }
        )
    dropped = sum(v.excluded for v in shards)
    surveys, records = _split_survey(approved, manifest.data_format, split, shards, shard_surveys)
    if records != sum(v.records for v in shards):
        raise IntegrityError(
            f"the field survey of split {split} counts {records} records, the approved view "
            f"{sum(v.records for v in shards)}: survey the approved shards"
        )
    record_set: dict[str, Any] = {
        "@type": "cr:RecordSet",
        "@id": split,
        "name": split,
        "description": f"split {split}: {records} records in {len(shards)} shards ({manifest.data_format})"
        + (f"; the {dropped} records the approval excludes are left out" if dropped else ""),
        "field": [_field(split, s, records) for s in surveys],
        "tv:recordCount": records,
        "tv:excludedRecords": dropped,
        "tv:stages": _stages(shards),
        "tv:curricula": {name: c.model_dump(mode="json") for name, c in manifest.splits[split].curricula.items()},
    }
    profile = _profile(storage, approved, split)
    if profile is not None:
        record_set["tv:profile"] = profile
    return files, record_set


def _shard_object(split: str, view: ViewShard, folder: str, formats: list[str], note: str) -> dict[str, Any]:
    """A shard's file object: the published shard, or the clean copy of one with excluded records."""
    e = view.entry
    what = f"{split} shard {e.key}: {view.records} records"
    if view.excluded:
        what += (
            f", a copy of the published shard ({e.uri}, sha256 {e.sha256}) without the {view.excluded} records "
            "the approval excludes"
        )
    return _file_object(
        _shard_id(split, e), f"{split}/{e.key}", _url(view.ref.uri, folder), view.ref, formats, f"{what}; {note}"
    )


def _stages(shards: list[ViewShard]) -> dict[str, list[str]]:
    """Shard keys per curriculum stage (``_``: no stage), in manifest order."""
    out: dict[str, list[str]] = {}
    for v in shards:
        out.setdefault(v.entry.curriculum_stage or "_", []).append(v.entry.key)
    return out


def _profile(storage: StorageSource, approved: ApprovedDataset, split: str) -> dict[str, Any] | None:
    """The split's metrics sidecar when the approval binds one (read and checked against its sha256)."""
    ref = approved.bindings.get(sidecar_name(split))
    if ref is None:
        return None
    sidecar = read_metrics_sidecar(storage_of(storage), ref.uri, ref.sha256)
    return {
        "sidecar": {"contentUrl": normalize_uri(ref.uri), "sha256": ref.sha256},
        "records": sidecar.records,
        "metrics": sidecar.metrics,
        "validation": {"mode": sidecar.validation.mode, "offending_count": sidecar.validation.offending_count},
    }


def croissant_card(
    storage: StorageSource,
    approved: ApprovedDataset,
    *,
    card_uri: str | None = None,
    name: str | None = None,
    description: str | None = None,
    license: str | None = None,
    cite_as: str | None = None,
    version: str | None = None,
    date_published: str | None = None,
    surveys: Mapping[str, Mapping[str, Survey]] | None = None,
) -> dict[str, Any]:
    """The Croissant JSON-LD document of `approved` (opened from a signed record with
    `open_approved`), for a card stored at `card_uri` (default `default_card_uri`).

    Reads every record once (blocks verified) to declare each split's fields, unless
    `surveys` gives each approved shard's (field surveys, record count) by split and shard key,
    from a verification pass over its bytes; and reads each bound ``<split>_metrics`` sidecar.
    For an approval with exclusions it first writes the clean copies of the shards with
    excluded records beside the card (``approved-view/``, create-only, named by content),
    surveying their records as it writes them: the card lists those instead, and reads no
    other shard when `surveys` is given. `name` defaults to the dataset's folder (`dataset_name`
    of its data manifest). Other properties left None are omitted (Croissant recommends
    license, citeAs, version and datePublished; mlcroissant warns without them).
    """
    record = _record(approved)
    if approved.amendments is not None:
        # The card would list shards that still hold records the amendments took down.
        raise ApprovalError(
            "a Croissant card of an amended view is not supported yet: open the approval without amendments= "
            "for the card of what was approved, and publish the amendments beside it"
        )
    _check_date(date_published)
    folder = parent_uri(normalize_uri(card_uri or default_card_uri(approved)))
    manifest = approved.manifest
    distribution: list[dict[str, Any]] = [
        _file_object(
            "files/custody/approval",
            "approval record",
            _url(record.uri, folder),
            record.ref,
            [DSSE_MEDIA_TYPE],
            "the signed trainvault approval (in-toto statement in a DSSE envelope) this card describes",
        ),
        _file_object(
            "files/custody/data-manifest",
            "data manifest",
            _url(approved.manifest_uri, folder),
            ObjectRef(uri=approved.manifest_uri, sha256=approved.manifest_sha256, size=approved.manifest_size),
            ["application/json"],
            "the trainvault data manifest the approval binds (canonical JSON)",
        ),
    ]
    record_sets = []
    for split in manifest.splits:
        files, record_set = _split_nodes(
            storage, approved, manifest, split, folder, None if surveys is None else surveys.get(split, {})
        )
        distribution += files
        record_sets.append(record_set)
    _check_unique_ids([*distribution, *record_sets])
    s = approved.summary
    optional = {"license": license, "citeAs": cite_as, "version": version, "datePublished": date_published}
    return {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": name or dataset_name(approved.manifest_uri),
        "description": description
        or (
            f"trainvault publication {approved.manifest_uri} ({manifest.data_format}): {s.shards} shards, "
            f"{_approved_records(s)}; approved against evaluation release {s.evaluation_release_id} "
            f"({s.contamination_method}, {s.contaminated_items} contaminated items)"
        ),
        **{k: v for k, v in optional.items() if v is not None},
        "distribution": distribution,
        "recordSet": record_sets,
        "tv:approval": _approval(approved, record),
    }


def _approved_records(summary: VerificationSummary) -> str:
    """The records a trainer gets, and those the approval excludes (the card leaves them out)."""
    excluded = summary.exclusions.records if summary.exclusions is not None else 0
    if not excluded:
        return f"{summary.records} records"
    return f"{summary.records - excluded} approved records ({excluded} excluded records left out)"


def _check_date(date_published: str | None) -> None:
    """Croissant readers refuse a ``datePublished`` that is not ISO 8601; a card is create-only, so check first."""
    if date_published is None:
        return
    try:
        datetime.datetime.fromisoformat(date_published)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"date_published {date_published!r} is not an ISO 8601 date; give YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS[+HH:MM] "
            "(Croissant readers refuse other forms)"
        ) from None


def _check_unique_ids(nodes: list[dict[str, Any]]) -> None:
    """Every node id names one node (a split named ``files`` could collide with file node ids)."""
    seen: set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node["@id"] in seen:
            raise ManifestError(
                f"two nodes of the Croissant card would have the id {node['@id']!r} (a split, field "
                "or shard name collides with another); rename the split or field"
            )
        seen.add(node["@id"])
        stack += node.get("field", []) + node.get("subField", [])


def _approval(approved: ApprovedDataset, record: ApprovalRecordRef) -> dict[str, Any]:
    return {
        "record": {"uri": record.uri, "sha256": record.sha256, "signers": list(record.signers)},
        "bindings": {name: {"uri": ref.uri, "sha256": ref.sha256} for name, ref in approved.bindings.items()},
        "verification": approved.summary.model_dump(mode="json"),
    }


def card_bytes(card: Mapping[str, Any]) -> bytes:
    """The card as stored: indented UTF-8 JSON, keys in the order built (deterministic)."""
    return (json.dumps(card, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def write_croissant(
    storage: StorageSource, approved: ApprovedDataset, uri: str | None = None, **about: Any
) -> WrittenCard:
    """Build the card (`croissant_card`; `about`: its name, description, license, cite_as,
    version, date_published) and write it create-only at `uri` (default `default_card_uri`).
    The same card again is a no-op; another card at `uri` is a `ConflictError`."""
    uri = normalize_uri(uri or default_card_uri(approved))
    data = card_bytes(croissant_card(storage, approved, card_uri=uri, **about))
    storage_of(storage).put_create(uri, data)
    return WrittenCard(ObjectRef(uri=uri, sha256=sha256_hex(data), size=len(data)))
