"""The dataset spec resource: what to build, where, and how it is judged and signed.

Everything a publication's bytes depend on is in `data_fields()`; the version of a build
is a digest of those fields and the producer pins, so unchanged inputs land in the same
`<root>/<dataset>/<version>/` folder (and reuse every completed shard) while any change
lands in a new one, never overwriting a published object.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from resources.policy import ApprovalPolicyConfig
from trainvault import ConfigurationError
from trainvault.approval import REPORT_ATTESTATION_NAME, SCAN_ATTESTATION_NAME
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.contamination import Exclusions
from trainvault.uris import join_uri, normalize_uri

if TYPE_CHECKING:
    from trainvault.approval import ApprovalPolicy, ProducerPins, SigningKey, VerifyingKey

NO_STAGE = "_"
#: Packages whose versions decide the bytes of a shard (encoding and codecs).
PINNED_PACKAGES = ("trainvault", "msgpack", "zstandard", "pyarrow")


class SplitSpec(dg.Config):
    """One split: its curriculum stages (none: a split without stages) and shard ids per stage."""

    name: str
    stages: list[str] = Field(default_factory=list)
    shard_ids: list[str]


class CurriculumSpec(dg.Config):
    """A curriculum registered over a split's shards: the shards of `stages`, stage by stage."""

    split: str
    name: str
    stages: list[str]


class ScheduleSpec(dg.Config):
    """When the dataset's lifecycle rebuilds: a cron expression, on or off when the location loads."""

    cron: str = "0 3 * * *"
    enabled: bool = False


class DatasetSpec(dg.ConfigurableResource["DatasetSpec"]):
    """What to build: the dataset, its shards, its generator, its evaluation and signing."""

    name: str = Field(description="dataset name: the folder under root_uri and the prefix of its asset keys")
    description: str = Field(default="", description="what the dataset is, shown in the UI")
    root_uri: str = Field(description="a local folder, file:// or s3:// URI under which publications live")
    data_format: str = "msgpack.zst"
    splits: list[SplitSpec]
    curricula: list[CurriculumSpec] = Field(default_factory=list)
    records_per_shard: int = 200
    generator: str = Field(
        default="pipelines.examples.curriculum:generate_records",
        description="module:function(split, stage, shard_id, count) -> iterable of records",
    )
    stage_metadata: str | None = Field(
        default="pipelines.examples.curriculum:stage_metadata",
        description="module:function(split, stage) -> curriculum metadata of a stage",
    )
    shard_threads: int = Field(default=2, description="shards derived at once within one run")
    evaluation_release_id: str = "trainvault-demo-evals"
    evaluation_sources: list[str] = Field(
        default_factory=lambda: [
            "trainvault.contamination:humaneval_benchmark",
            "pipelines.examples.benchmarks:synthetic_benchmark",
        ],
        description="module:function() -> trainvault.contamination.BenchmarkItems, one per benchmark",
    )
    ngram_n: int = 13
    scan_fields: list[str] = Field(default_factory=lambda: ["text"])
    signing_key_env: str = Field(
        default="TRAINVAULT_SIGNING_KEY", description="environment variable holding the Ed25519 private key (PEM)"
    )
    signing_key_path: str | None = Field(default=None, description="or a file holding it (PEM, owner-only)")
    trusted_keys_path: str | None = Field(default=None, description="the public key a trainer trusts (PEM file)")
    scanner_key_env: str = Field(
        default="TRAINVAULT_SCANNER_KEY",
        description="environment variable holding the scanner's Ed25519 private key, which signs the scan manifest "
        "and the contamination report (unset, and no scanner_key_path: the signing key)",
    )
    scanner_key_path: str | None = Field(default=None, description="or a file holding it (PEM, owner-only)")
    trusted_scanner_keys: list[str] = Field(
        default_factory=list,
        description="public keys (PEM files) the gate trusts to sign scans and reports (empty: trusted_keys_path)",
    )
    oms_key_path: str | None = Field(
        default=None,
        description="an ECDSA private key (PEM, `trainvault keygen --type ecdsa-p256`): the approval also gets an "
        "OpenSSF Model Signing signature of the data folder, beside it (unset: none)",
    )
    policy: ApprovalPolicyConfig = Field(
        default_factory=ApprovalPolicyConfig, description="re-scan sample and exclusions"
    )
    owners: list[str] = Field(default_factory=list, description="Dagster owners: emails or team:<name>")
    tags: dict[str, str] = Field(default_factory=dict, description="Dagster tags on every asset of the dataset")
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec, description="the nightly rebuild")

    # -- shards ---------------------------------------------------------------

    def shards(self) -> list[tuple[str, str | None, str]]:
        """Every shard as (split, stage or None, shard id), in spec order."""
        out: list[tuple[str, str | None, str]] = []
        for split in self.splits:
            stages: list[str | None] = list(split.stages) if split.stages else [None]
            for stage in stages:
                for shard_id in split.shard_ids:
                    out.append((split.name, stage, shard_id))
        return out

    def partition_keys(self) -> list[str]:
        return [partition_key(*s) for s in self.shards()]

    def records(self, split: str, stage: str | None, shard_id: str) -> Iterable[dict[str, Any]]:
        records: Iterable[dict[str, Any]] = load_callable(self.generator)(
            split, stage, shard_id, self.records_per_shard
        )
        return records

    def metadata_of_stage(self, split: str, stage: str | None) -> dict[str, Any] | None:
        if stage is None or self.stage_metadata is None:
            return None
        metadata: dict[str, Any] | None = load_callable(self.stage_metadata)(split, stage)
        return metadata

    # -- keys and policy ----------------------------------------------------

    def scanner_signing_key(self) -> SigningKey:
        """The scanner's key: scanner_key_path, else $scanner_key_env, else the dataset's signing key."""
        from trainvault.approval import load_signing_key

        if self.scanner_key_path:
            return load_signing_key(self.scanner_key_path)
        if os.environ.get(self.scanner_key_env):
            return load_signing_key(None, env=self.scanner_key_env)
        return load_signing_key(self.signing_key_path, env=self.signing_key_env)

    def scanner_key_paths(self) -> list[str]:
        """The public key files trusted to sign scans and reports: trusted_scanner_keys, else trusted_keys_path."""
        return self.trusted_scanner_keys or ([self.trusted_keys_path] if self.trusted_keys_path else [])

    def scanner_public_keys(self) -> list[VerifyingKey]:
        """The public keys trusted to sign scans and reports (none: every shard is re-scanned at the gate)."""
        from trainvault.approval import load_verifying_key

        return [load_verifying_key(p) for p in self.scanner_key_paths()]

    def approval_policy(
        self, evaluation_release_sha256: str | None = None, verifier_contract_sha256: str | None = None
    ) -> ApprovalPolicy:
        """The `ApprovalPolicy` the gate and a trainer apply to this dataset's approvals (None: any release, any
        contract no looser than the library's)."""
        return self.policy.approval_policy(
            self.scanner_public_keys(),
            evaluation_release_sha256=evaluation_release_sha256,
            verifier_contract_sha256=verifier_contract_sha256,
        )

    # -- versions and locations ---------------------------------------------

    def data_fields(self) -> dict[str, Any]:
        """The spec fields a shard's bytes depend on (not where it is stored, not how it is judged)."""
        return {
            "name": self.name,
            "data_format": self.data_format,
            "splits": [s.model_dump() for s in self.splits],
            "curricula": [c.model_dump() for c in self.curricula],
            "records_per_shard": self.records_per_shard,
            "generator": self.generator,
            "stage_metadata": self.stage_metadata,
        }

    def code_revision(self) -> str:
        """The code revision of the producer: a digest of the generator modules' source.

        Not the git commit, so a commit that leaves the generator alone keeps the version."""
        code = {path: source_sha256(path) for path in filter(None, (self.generator, self.stage_metadata))}
        return "sha256:" + sha256_hex(canonical_json(code))

    def producer_pins(self) -> ProducerPins:
        """Package versions (trainvault and the codecs that decide a shard's bytes) and code revision."""
        from trainvault.approval import collect_producer_pins

        packages = [p for p in PINNED_PACKAGES if p != "pyarrow" or self.data_format == "parquet"]
        return collect_producer_pins(packages, code_revision=self.code_revision())

    def layout(self, pins_sha256: str | None = None) -> VersionLayout:
        """Where this spec's build lives: the version is a digest of the data fields and the pins."""
        if pins_sha256 is None:
            pins_sha256 = self.producer_pins().document_sha256()
        digest = sha256_hex(canonical_json({"spec": self.data_fields(), "producer_pins_sha256": pins_sha256}))
        return self.layout_at("v-" + digest[:12])

    def layout_at(self, version: str) -> VersionLayout:
        """The layout of a version already decided (by the run's producer pins)."""
        return VersionLayout(self.name, version, join_uri(normalize_uri(self.root_uri), f"{self.name}/{version}"))

    def evaluation_root(self, benchmark_digest: str) -> str:
        return join_uri(
            normalize_uri(self.root_uri), f"evaluations/{self.evaluation_release_id}-{benchmark_digest[:12]}"
        )

    @property
    def shard_results_root(self) -> str:
        """The folder of the dataset's per-shard results, named by content and shared by its versions."""
        return join_uri(normalize_uri(self.root_uri), f"{self.name}/shard-results")

    def contract_uri(self, contract_sha256: str) -> str:
        return join_uri(normalize_uri(self.root_uri), f"contracts/{contract_sha256[:12]}/verifier-contract-v1.json")


@dataclass(frozen=True)
class VersionLayout:
    """The folders and documents of one versioned build: ``<root>/<dataset>/<version>/``."""

    dataset: str
    version: str
    base: str

    @property
    def manifest_uri(self) -> str:
        return join_uri(self.base, "data/data-manifest-v1.json")

    @property
    def data_root(self) -> str:
        return join_uri(self.base, "data")

    @property
    def producer_pins_uri(self) -> str:
        return join_uri(self.base, "producer-pins-v1.json")

    def scan_manifest_uri(self, scanner: str) -> str:
        """The training scan manifest signed by key id `scanner` (an in-toto statement in a DSSE
        envelope), in a folder per scanner key so a new key never collides with an older signature."""
        return join_uri(self.base, f"scans/{scanner[:16]}/{SCAN_ATTESTATION_NAME}")

    def contamination_dir(self, release_sha256: str, contract_sha256: str) -> str:
        return join_uri(self.base, f"contamination/{release_sha256[:12]}-{contract_sha256[:12]}")

    def report_uri(self, release_sha256: str, contract_sha256: str, scanner: str) -> str:
        """The contamination report signed by key id `scanner` (an in-toto statement in a DSSE envelope)."""
        return join_uri(
            self.contamination_dir(release_sha256, contract_sha256), f"{scanner[:16]}/{REPORT_ATTESTATION_NAME}"
        )

    def exclusions_uri(self, release_sha256: str, contract_sha256: str, scanner: str) -> str:
        """The exclusions taken from the report key id `scanner` signed, beside it."""
        return join_uri(
            self.contamination_dir(release_sha256, contract_sha256), f"{scanner[:16]}/{Exclusions.FILE_NAME}"
        )

    def shard_scan_uri(self, release_sha256: str, contract_sha256: str, key: str) -> str:
        """One shard's scan result: ``shards/<split>.<stage or _>.<shard_id>.json`` beside the report."""
        name = key.replace("/", ".")
        return join_uri(self.contamination_dir(release_sha256, contract_sha256), f"shards/{name}.json")

    def approval_uri(self, request_sha256: str) -> str:
        """Named by the approval request's digest: the same inputs approved again reuse the record."""
        return join_uri(self.base, f"approvals/approval-{request_sha256[:16]}.dsse.json")

    def croissant_uri(self, request_sha256: str) -> str:
        """The approval's Croissant card, in the version's root (so shard URLs stay relative and readable)."""
        return join_uri(self.base, f"croissant-{request_sha256[:16]}.json")

    def handoff_uri(self, asset: str, sha256: str) -> str:
        """A hand-off reference between assets, named by its own digest (same content, same object)."""
        return join_uri(self.base, f"handoffs/{asset}-{sha256[:16]}.json")

    @property
    def handoffs_dir(self) -> str:
        return join_uri(self.base, "handoffs")


def partition_key(split: str, stage: str | None, shard_id: str) -> str:
    """``<split>/<stage or _>/<shard_id>``: the shard's place in the publication."""
    return f"{split}/{stage or NO_STAGE}/{shard_id}"


def parse_partition_key(key: str) -> tuple[str, str | None, str]:
    split, stage, shard_id = key.split("/")
    return split, (None if stage == NO_STAGE else stage), shard_id


def load_callable(path: str) -> Callable[..., Any]:
    """``package.module:function`` -> the function."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ConfigurationError(f"{path!r}: expected 'package.module:function'")
    function: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return function


def source_sha256(path: str) -> str:
    """SHA-256 of the source file that defines `path` (the code revision of a generator)."""
    module = importlib.import_module(path.partition(":")[0])
    return hashlib.sha256(inspect.getsource(module).encode()).hexdigest()
