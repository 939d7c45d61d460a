"""The loader's per-step figures as Prometheus gauges, when `prometheus_client` is installed.

trainvault does not depend on it: without it, building a `PrometheusExport` raises an
ImportError that names the package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


class PrometheusExport:
    """Sets gauges from `TrainVaultDataLoader.figures()`: call it with each step's dict.

    `registry`: a `prometheus_client.CollectorRegistry` (default: the process's default
    registry, which `prometheus_client.start_http_server` serves). Gauges, all labelled by
    rank: ``<prefix>_data_wait_seconds`` (the last step's wait), ``<prefix>_window_seconds``
    (per worker and stage: ``data_wait`` and each read stage, over the window),
    ``<prefix>_window_count`` (per worker: bytes, records, blocks, steps over the window)
    and ``<prefix>_slowest_rank_data_wait_seconds`` (labelled by the slowest rank).
    """

    def __init__(self, registry: Any = None, prefix: str = "trainvault_loader"):
        prom = _prometheus()
        kw = {} if registry is None else {"registry": registry}
        self.wait = prom.Gauge(
            f"{prefix}_data_wait_seconds", "Seconds the trainer waited for its last batch", ["rank"], **kw
        )
        self.seconds = prom.Gauge(
            f"{prefix}_window_seconds", "Seconds per stage over the figures window", ["rank", "worker", "stage"], **kw
        )
        self.counts = prom.Gauge(
            f"{prefix}_window_count",
            "Bytes, records, blocks and steps over the figures window",
            ["rank", "worker", "what"],
            **kw,
        )
        self.slowest = prom.Gauge(
            f"{prefix}_slowest_rank_data_wait_seconds",
            "Window data wait of the slowest rank at the last gather",
            ["rank"],
            **kw,
        )

    def __call__(self, figures: Mapping[str, Any]) -> None:
        rank = str(figures["rank"])
        self.wait.labels(rank).set(figures["data_wait_s"])
        for worker, row in figures["workers"].items():
            for stage in ("data_wait", *STAGES):
                self.seconds.labels(rank, worker, stage).set(row[f"{stage}_s"])
            for what in ("bytes", "records", "blocks", "steps"):
                self.counts.labels(rank, worker, what).set(row[what])
        slowest = figures.get("slowest_rank")
        if slowest is not None:
            self.slowest.labels(str(slowest["rank"])).set(slowest["data_wait_s"])
