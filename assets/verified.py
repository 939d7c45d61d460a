"""The verification pass's stored per-shard results, as the stages after it read them
(training_scan, dataset_profile, the Croissant card of approved_dataset): each reused only when
signed by the dataset's scanner key, the key the verification pass stored it under."""

from resources.dataset import DatasetSpec
from resources.handoff import Handoff
from trainvault.publication import DataManifest, Publication, ShardEntry
from trainvault.storage import Storage
from trainvault.verification import ShardSurvey, stored_survey

Surveys = dict[str, list[tuple[ShardEntry, ShardSurvey]]]


def shard_surveys(storage: Storage, spec: DatasetSpec, data_manifest: Handoff) -> Surveys:
    """Per split of the handed-off manifest, each shard entry with the survey the verification pass
    stored for its bytes (`IntegrityError` for a shard it has not verified)."""
    manifest = Publication.load(storage, data_manifest.ref.uri, sha256=data_manifest.ref.sha256).manifest
    return surveys_of(storage, spec, manifest)


def surveys_of(storage: Storage, spec: DatasetSpec, manifest: DataManifest) -> Surveys:
    """`shard_surveys` of a manifest already loaded (an approval's)."""
    scanner = spec.scanner_signing_key().public_key  # the key the verification pass signed them with
    folder, data_format = spec.shard_results_root, manifest.data_format
    return {
        split: [(e, stored_survey(storage, folder, data_format, e, scanner_key=scanner)) for e in sm.shards]
        for split, sm in manifest.splits.items()
    }
