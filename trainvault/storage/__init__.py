"""Object storage: URIs to stores, and the few operations trainvault needs.

A URI's scheme picks the store: ``s3://bucket/key`` (any S3-compatible service; endpoint,
region and keys from `StorageConfig`), ``file:///abs/path`` or a plain path (the local
folder store), ``memory://name/key`` (an in-process store, for tests and examples).

Publication writes are create-only (``If-None-Match: *``): an object, once written, never
changes. Writing the same bytes again is a no-op; different bytes are a `ConflictError`.

The modules: `config` (settings), `local` and `objectstore` (the backends, behind the
`backend` contract), `clients` (one backend per store), `recovery` (retries, resumes, the
first-contact rule, `STATS`), `translate` (native errors to trainvault's), `store` (`Storage`),
`reads` (`READS`: bytes and requests every read returned, per process), `readable`
(`ReadableStorage`: the read-only protocol `Storage` and the approval's custody storage satisfy).
"""

from trainvault.storage.config import S3_ENV_VARS, StorageConfig
from trainvault.storage.store import Storage

__all__ = [
    "S3_ENV_VARS",
    "Storage",
    "StorageConfig",
]
