"""Teacher representations: a pinned safetensors publication joined to tokens by block id.

Importing this package does not import torch, numpy or safetensors; writing and reading
need the ``representation`` extra.
"""

from trainvault.representations.loader import RepresentationExample

__all__ = [
    "RepresentationExample",
]
