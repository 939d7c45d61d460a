"""The dataset catalog: the datasets the code location serves, declared in YAML.

Where the file is: ``$TRAINVAULT_DATASETS`` when set, else ``[tool.trainvault] datasets``
in the repository's pyproject.toml, else ``pipelines/datasets.yaml``; a relative path is
relative to the repository root. Each entry under ``datasets:`` is a
`resources.dataset.DatasetSpec`; a split may give ``shards: N`` (ids ``0..N-1``) instead
of ``shard_ids``. String values may name environment variables: ``${VAR}`` (must be set)
or ``${VAR:-default}`` (the default when unset or empty). A relative local path in
``root_uri``, ``signing_key_path``, ``trusted_keys_path``, ``scanner_key_path``,
``oms_key_path`` or ``trusted_scanner_keys`` is relative to the YAML file's folder. The ``policy:`` block is a
`resources.policy.ApprovalPolicyConfig` (re-scan sample, exclusions). Anything malformed raises
`ConfigurationError` naming the file, the dataset and the field, so the location fails to
load instead of serving half a catalog.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

# Dagster's own test of a schedule's cron, so an entry it would refuse fails here, naming the dataset.
from dagster._utils.schedules import is_valid_cron_string
from pydantic import BaseModel, ValidationError

from resources.dataset import NO_STAGE, DatasetSpec, ScheduleSpec
from resources.policy import ApprovalPolicyConfig
from trainvault import ConfigurationError, StorageError
from trainvault.documents import describe_validation_error
from trainvault.formats import FORMATS
from trainvault.uris import normalize_uri

REPO = Path(__file__).resolve().parents[1]
DEFAULT = "pipelines/datasets.yaml"
ENV = "TRAINVAULT_DATASETS"
#: A dataset name is an asset key prefix, a job and a schedule name and a folder: a Python identifier.
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
OWNER = re.compile(r"^(team:[A-Za-z0-9_-]+|[^@\s]+@[^@\s]+\.[^@\s]+)$")
TAG = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")
CRON = re.compile(r"^(@(hourly|daily|weekly|monthly|yearly)|\S+( \S+){4})$")
CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
#: A split, stage or shard id is one segment of a partition key ``<split>/<stage or _>/<shard id>``.
SEGMENT = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")
#: Nested blocks whose keys are checked like an entry's (pydantic would ignore unknown ones).
NESTED: dict[str, type[BaseModel]] = {"policy": ApprovalPolicyConfig, "schedule": ScheduleSpec}
PATH_FIELDS = ("root_uri", "signing_key_path", "trusted_keys_path", "scanner_key_path", "oms_key_path")


def datasets_path(environ: dict[str, str] | None = None) -> Path:
    """The catalog file: $TRAINVAULT_DATASETS, else pyproject's [tool.trainvault] datasets, else the default."""
    env = os.environ if environ is None else environ
    if env.get(ENV):
        return (REPO / env[ENV]).resolve()
    pyproject = REPO / "pyproject.toml"
    setting = DEFAULT
    if pyproject.exists():
        setting = tomllib.loads(pyproject.read_text()).get("tool", {}).get("trainvault", {}).get("datasets", DEFAULT)
    return (REPO / setting).resolve()


def load_datasets(path: str | Path) -> list[DatasetSpec]:
    """Every dataset of the catalog at `path`, validated; `ConfigurationError` names what is wrong."""
    path = Path(path)
    try:
        doc = yaml.load(path.read_text(), Loader=UniqueKeyLoader)
    except OSError as exc:
        raise ConfigurationError(
            f"dataset catalog {path}: cannot read it ({exc.strerror}); set ${ENV} to the file"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"dataset catalog {path}: not valid YAML ({exc})") from None
    except DuplicateKey as exc:
        raise ConfigurationError(f"dataset catalog {path}: {exc}; each field may appear once per mapping") from None
    entries = doc.get("datasets") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigurationError(f"dataset catalog {path}: expected a non-empty list under 'datasets:'")
    specs, seen = [], set()
    for n, entry in enumerate(entries):
        spec = parse_entry(path, n, entry)
        if spec.name in seen:
            raise ConfigurationError(
                f"dataset catalog {path}: dataset {spec.name!r} is declared twice; names must be unique"
            )
        seen.add(spec.name)
        specs.append(spec)
    return specs


class DuplicateKey(Exception):
    """A mapping that names one key twice (PyYAML would silently keep the last value)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # SafeLoader refuses it below ("found unhashable key"), a YAMLError
            if key in seen:
                raise DuplicateKey(f"key {key!r} is given twice (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def field_names(model: type[BaseModel]) -> list[str]:
    """The fields a catalog entry may give for `model`, in declaration order."""
    return list(model.model_fields)


def parse_entry(path: Path, n: int, entry: Any) -> DatasetSpec:
    """One catalog entry as a `DatasetSpec`."""
    if not isinstance(entry, dict):
        raise ConfigurationError(f"dataset catalog {path}: entry {n} is not a mapping of fields")
    name = entry.get("name")
    where = f"dataset catalog {path}: dataset {name!r}" if name else f"dataset catalog {path}: entry {n}"
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigurationError(
            f"{where}: field 'name' must be an identifier (letters, digits, _; not starting with a digit)"
        )
    known = field_names(DatasetSpec)
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise ConfigurationError(f"{where}: field {unknown[0]} is not a dataset field (known: {', '.join(known)})")
    for field, model in NESTED.items():
        value = entry.get(field)
        allowed = field_names(model)
        extra = sorted(set(value) - set(allowed)) if isinstance(value, dict) else []
        if extra:
            raise ConfigurationError(
                f"{where}: field {field}.{extra[0]} is not a {field} field (known: {', '.join(allowed)})"
            )
    fields = {k: interpolate(v, where, k) for k, v in entry.items()}
    if not isinstance(fields.get("splits"), list):
        raise ConfigurationError(
            f"{where}: field 'splits' must be a list of splits ({{name, shards or shard_ids, stages}})"
        )
    fields["splits"] = [split_fields(s, where) for s in fields["splits"]]
    for field in PATH_FIELDS:
        if field in fields:
            fields[field] = relative_to(path, fields[field])
    if isinstance(fields.get("trusted_scanner_keys"), list):
        fields["trusted_scanner_keys"] = [relative_to(path, v) for v in fields["trusted_scanner_keys"]]
    try:
        spec = DatasetSpec(**fields)
    except ValidationError as exc:
        raise ConfigurationError(f"{where}: {describe_validation_error(exc)}") from None
    check_spec(spec, where)
    return spec


def relative_to(path: Path, value: Any) -> Any:
    """A relative local path as an absolute one, relative to the catalog's folder; anything else as it is."""
    if isinstance(value, str) and value and "://" not in value and not Path(value).is_absolute():
        return str((path.parent / value).resolve())
    return value


def split_fields(split: Any, where: str) -> Any:
    """``shards: N`` as ``shard_ids: ["0", ..., "N-1"]``."""
    if not isinstance(split, dict) or "shards" not in split:
        return split
    count = split.pop("shards")
    if type(count) is not int or count < 1 or "shard_ids" in split:
        raise ConfigurationError(
            f"{where}: field 'splits.{split.get('name')}.shards' must be a positive integer (or give shard_ids instead)"
        )
    return {**split, "shard_ids": [str(i) for i in range(count)]}


def check_spec(spec: DatasetSpec, where: str) -> None:
    """What pydantic's types cannot say: generators, owners, tags, the schedule, shards."""
    callables = {
        "generator": spec.generator,
        "stage_metadata": spec.stage_metadata,
        **{f"evaluation_sources.{i}": source for i, source in enumerate(spec.evaluation_sources)},
    }
    for field, value in callables.items():
        if value is not None and not CALLABLE.match(value):
            raise ConfigurationError(f"{where}: field '{field}' is {value!r}, expected 'package.module:function'")
    for owner in spec.owners:
        if not OWNER.match(owner):
            raise ConfigurationError(f"{where}: field 'owners' has {owner!r}, expected an email or team:<name>")
    for k, v in spec.tags.items():
        if not TAG.match(k) or not (v == "" or TAG.match(v)):
            raise ConfigurationError(
                f"{where}: field 'tags' has {k!r}: {v!r}; keys and values are up to 63 of letters, digits, _ . -"
            )
    if not CRON.match(spec.schedule.cron.strip()) or not is_valid_cron_string(spec.schedule.cron.strip()):
        raise ConfigurationError(f"{where}: field 'schedule.cron' is {spec.schedule.cron!r}, expected five cron fields")
    if not spec.shards():
        raise ConfigurationError(f"{where}: field 'splits' declares no shard")
    check_partitions(spec, where)
    if spec.records_per_shard < 1:
        raise ConfigurationError(f"{where}: field 'records_per_shard' must be at least 1")
    if spec.ngram_n < 1:
        raise ConfigurationError(f"{where}: field 'ngram_n' must be at least 1")
    if spec.data_format not in FORMATS:
        raise ConfigurationError(
            f"{where}: field 'data_format' is {spec.data_format!r}, expected one of {', '.join(FORMATS)}"
        )
    try:
        normalize_uri(spec.root_uri)
    except StorageError as exc:
        raise ConfigurationError(f"{where}: field 'root_uri': {exc}") from None
    try:
        spec.policy.check()
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def check_partitions(spec: DatasetSpec, where: str) -> None:
    """Split, stage and shard ids that make one partition key per shard, which parses back to it; curricula
    over declared stages."""
    for field, names in [("splits", [s.name for s in spec.splits])] + [
        (f"splits.{s.name}.{kind}", values)
        for s in spec.splits
        for kind, values in (("stages", s.stages), ("shard_ids", s.shard_ids))
    ]:
        for value in names:
            if not SEGMENT.match(value) or (field.endswith(".stages") and value == NO_STAGE):
                raise ConfigurationError(
                    f"{where}: field '{field}' has {value!r}; a name is 1 to 63 of letters, "
                    f"digits, _ . - (no '/'; a stage is not {NO_STAGE!r})"
                )
        twice = sorted({v for v in names if names.count(v) > 1})
        if twice:
            raise ConfigurationError(
                f"{where}: field '{field}' names {twice[0]!r} twice; each shard needs its own partition key"
            )
    stages = {s.name: s.stages for s in spec.splits}
    for cur in spec.curricula:
        missing = [s for s in cur.stages if s not in stages.get(cur.split, [])]
        if cur.split not in stages or missing or not cur.stages:
            declared = stages.get(cur.split, "no such split")
            raise ConfigurationError(
                f"{where}: field 'curricula.{cur.name}' orders stages {cur.stages} of split "
                f"{cur.split!r}; give stages the split declares ({declared})"
            )


def interpolate(value: Any, where: str, field: str) -> Any:
    """``${VAR}`` and ``${VAR:-default}`` in every string of `value`, from the environment."""
    if isinstance(value, dict):
        return {k: interpolate(v, where, f"{field}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, where, f"{field}.{i}") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(m: re.Match[str]) -> str:
        name: str = m.group(1)
        default: str | None = m.group(3)
        got = os.environ.get(name)
        if got:
            return got
        if default is None:
            raise ConfigurationError(
                f"{where}: field '{field}' needs ${{{name}}}, which is not set: set it or write ${{{name}:-default}}"
            )
        return default

    out = VARIABLE.sub(substitute, value)
    # A whole-value variable may stand for a number ("records_per_shard: ${N:-200}").
    return int(out) if out != value and re.fullmatch(r"-?\d+", out) and VARIABLE.fullmatch(value) else out
