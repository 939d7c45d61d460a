"""The storage resource: where datasets live, and the credentials to reach them."""

from __future__ import annotations

import os

import dagster as dg
from pydantic import Field
from pydantic.config import JsonDict

from trainvault import TrainVault
from trainvault.storage import S3_ENV_VARS

_SECRET: JsonDict = {"dagster__is_secret": True}


class StorageResource(dg.ConfigurableResource["StorageResource"]):
    """Hands out a `TrainVault` for local paths, ``file://`` and ``s3://`` URIs.

    Leave everything unset for the embedded default (a local folder store). For S3 (or
    Tigris, R2, MinIO) set `s3_base_url`, `region` and the keys, the keys through
    `dg.EnvVar` so they never show in the UI or in run config (`storage_from_env`).
    """

    s3_base_url: str | None = Field(default=None, description="endpoint of an S3-compatible service")
    region: str | None = Field(default=None, description="S3 region")
    access_key_id: str | None = Field(default=None, description="S3 access key id", json_schema_extra=_SECRET)
    secret_access_key: str | None = Field(default=None, description="S3 secret access key", json_schema_extra=_SECRET)

    def vault(self) -> TrainVault:
        return TrainVault(
            s3_base_url=self.s3_base_url or None,
            region=self.region or None,
            access_key_id=self.access_key_id or None,
            secret_access_key=self.secret_access_key or None,
        )


def storage_from_env() -> StorageResource:
    """The store as the code location configures it: each setting from the variable
    `StorageConfig.from_env` reads (``TRAINVAULT_S3_*``) when that variable is set, as an
    `EnvVar` resolved at run start so keys never show in the UI; else unset."""
    return StorageResource(**{name: dg.EnvVar(var) for name, var in S3_ENV_VARS.items() if os.environ.get(var)})
