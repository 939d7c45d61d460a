"""Teacher representations: a pinned safetensors publication joined to tokens by block id.

Importing this package does not import torch, numpy or safetensors; writing and reading
need the ``representation`` extra.
"""

from trainvault.representations.documents import (
    ARTIFACT_MANIFEST_NAME,
    MANIFEST_NAME,
    ArtifactEntry,
    ArtifactManifest,
    Projection,
    RepresentationIndex,
    RepresentationManifest,
    Teacher,
)
from trainvault.representations.loader import RepresentationExample, iter_representation_examples
from trainvault.representations.writer import RepresentationWriter

__all__ = [
    "ARTIFACT_MANIFEST_NAME",
    "MANIFEST_NAME",
    "ArtifactEntry",
    "ArtifactManifest",
    "Projection",
    "RepresentationExample",
    "RepresentationIndex",
    "RepresentationManifest",
    "RepresentationWriter",
    "Teacher",
    "iter_representation_examples",
]
