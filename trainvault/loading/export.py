"""The loader's per-step figures as Prometheus gauges, when `prometheus_client` is installed.

trainvault does not depend on it: without it, building a `PrometheusExport` raises an
ImportError that names the package.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainvault.errors import ConfigurationError
from trainvault.loading.metrics import STAGES


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ImportError(
            "exporting loader figures to Prometheus needs prometheus_client, which trainvault does not install: "
            "pip install prometheus-client"
        ) from None
    return prometheus_client


@dataclass(frozen=True)
class _Families:
    """The gauges of one prefix on one registry, shared by every export onto it."""

    wait: Any
    seconds: Any
    counts: Any
    slowest: Any
    loaders: set[str] = field(default_factory=set)


#: registry -> prefix -> its gauges: a registry takes each metric name once, so exports share them.
_SHARED: weakref.WeakKeyDictionary[Any, dict[str, _Families]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _families(prom: Any, registry: Any, prefix: str) -> _Families:
    """The gauges `prefix` names on `registry`, made on first use."""
    by_prefix = _SHARED.setdefault(registry, {})
    if prefix in by_prefix:
        return by_prefix[prefix]

    def gauge(name: str, text: str, labels: list[str]) -> Any:
        try:
            return prom.Gauge(f"{prefix}_{name}", text, ["loader", *labels], registry=registry)
        except ValueError as exc:  # prometheus_client: another collector holds the name
            raise ConfigurationError(
                f"the Prometheus registry already has a metric {prefix}_{name} that trainvault did not make ({exc}): "
                "pass PrometheusExport(prefix=...) another prefix, or another registry"
            ) from None

    made = _Families(
        gauge("data_wait_seconds", "Seconds the trainer waited for its last batch", ["rank"]),
        gauge("window_seconds", "Seconds per stage over the figures window", ["rank", "worker", "stage"]),
        gauge("window_count", "Bytes, records, blocks and steps over the figures window", ["rank", "worker", "what"]),
        gauge("slowest_rank_data_wait_seconds", "Window data wait of the slowest rank at the last gather", ["rank"]),
    )
    by_prefix[prefix] = made
    return made


def _release(families: _Families, loader: str) -> None:
    with _LOCK:
        families.loaders.discard(loader)


class PrometheusExport:
    """Sets gauges from `TrainVaultDataLoader.figures()`: call it with each step's dict.

    `registry`: a `prometheus_client.CollectorRegistry` (default: the process's default
    registry, which `prometheus_client.start_http_server` serves). `loader`: the value of the
    ``loader`` label that tells this loader's series from another's (a train and a valid
    loader): exports onto one registry and prefix share the gauges, one `loader` name each
    (a name another live export holds is a `ConfigurationError`). Gauges, labelled by loader and rank:
    ``<prefix>_data_wait_seconds`` (the last step's wait), ``<prefix>_window_seconds``
    (per worker and stage: ``data_wait`` and each read stage, over the window),
    ``<prefix>_window_count`` (per worker: bytes, records, blocks, steps over the window)
    and ``<prefix>_slowest_rank_data_wait_seconds`` (labelled by the slowest rank).
    """

    def __init__(self, registry: Any = None, prefix: str = "trainvault_loader", loader: str = "train"):
        prom = _prometheus()
        if not isinstance(loader, str) or not loader:
            raise ConfigurationError(f"PrometheusExport(loader=...) must be a non-empty name, got {loader!r}")
        registry = prom.REGISTRY if registry is None else registry
        with _LOCK:
            families = _families(prom, registry, prefix)
            if loader in families.loaders:
                raise ConfigurationError(
                    f"a PrometheusExport for loader {loader!r} already sets {prefix}_* on this registry: give each "
                    "loader its own name, as PrometheusExport(loader='valid') beside the default 'train'"
                )
            families.loaders.add(loader)
        self.loader = loader
        self._families = families
        # The name is free again once this export is gone (a notebook cell run twice, a new run).
        weakref.finalize(self, _release, families, loader)

    def __call__(self, figures: Mapping[str, Any]) -> None:
        f, name, rank = self._families, self.loader, str(figures["rank"])
        f.wait.labels(name, rank).set(figures["data_wait_s"])
        for worker, row in figures["workers"].items():
            for stage in ("data_wait", *STAGES):
                f.seconds.labels(name, rank, worker, stage).set(row[f"{stage}_s"])
            for what in ("bytes", "records", "blocks", "steps"):
                f.counts.labels(name, rank, worker, what).set(row[what])
        slowest = figures.get("slowest_rank")
        if slowest is not None:
            f.slowest.labels(name, str(slowest["rank"])).set(slowest["data_wait_s"])
