"""What the loader reports about itself: per-step figures, the slowest rank, the watchdog.

Real loaders over a local folder and over the S3 test server behind the fault proxy, which
stalls a read the way a slow store does. No timing thresholds: waits are compared with
each other (stalled against clean), counts against the descriptors.
"""

from __future__ import annotations

import functools
import gc
import logging
import multiprocessing
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")


from trainvault import ConfigurationError, LoaderStallError, TrainVault  # noqa: E402
from trainvault.loading import LoaderPlan, Observability, SplitLoaderFactory  # noqa: E402
from trainvault.publication.reader import read_descriptor  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

B = 16


def ids(records: list[dict[str, Any]]) -> list[int]:
    return [int(r["id"]) for r in records]


def _save(vault: TrainVault, uri: str) -> None:
    saver = vault.dataset_saver(uri, block_bytes=2000)
    n = 0
    for k, size in enumerate((150, 130)):
        recs = [
            {"id": n + i, "text": f"record {n + i} " * 8, "tokens": np.full(40, n + i, dtype=np.int32)}
            for i in range(size)
        ]
        saver.save("train", None, recs, shard_id=f"s{k}")
        n += size
    saver.commit_manifest()


@pytest.fixture(scope="module")
def local_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("observe") / "data-manifest-v1.json")
    _save(TrainVault(), uri)
    return uri


@pytest.fixture
def proxy(faults: ModuleType, s3_server: str):
    px = faults.FaultProxy(int(s3_server.rsplit(":", 1)[1])).start()
    yield px
    px.stop()


@pytest.fixture
def s3_uri(s3_config: Callable[..., Any], s3_server: str, s3_bucket: str) -> str:
    uri = f"s3://{s3_bucket}/observe/data-manifest-v1.json"
    _save(TrainVault(storage=s3_config(s3_server)), uri)
    return uri


def _loader(storage: Any, uri: str, observe: Observability | None = None, **args: Any) -> Any:
    plan = LoaderPlan.create(collate_fn=ids, dataloader_args={"batch_size": B, **args}, observe=observe)
    return SplitLoaderFactory(storage, uri, plan).load("train")


def _epoch(loader: Any) -> tuple[list[list[int]], list[dict[str, Any]]]:
    """Every batch, and the figures after each step."""
    batches, figures = [], []
    for batch in loader:
        batches.append(batch)
        figures.append(loader.figures())
    return batches, figures


def _blocks(storage: Any, uri: str) -> tuple[int, int, int]:
    """Records, blocks and stored bytes of the train split, from its descriptors."""
    manifest = TrainVault(storage=storage.config).load_manifest(uri)
    descs = [read_descriptor(storage, e) for e in manifest.splits["train"].shards]
    return (
        sum(d.record_count for d in descs),
        sum(len(d.blocks) for d in descs),
        sum(b.length for d in descs for b in d.blocks),
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_figures_count_every_block_read_and_records_are_unchanged(local_uri: str, workers: int) -> None:
    storage = TrainVault().storage
    plain, _ = _epoch(_loader(storage, local_uri))
    loader = _loader(storage, local_uri, Observability(window_steps=1000, watchdog_s=60), num_workers=workers)
    batches, figures = _epoch(loader)
    assert batches == plain  # watching changes nothing in what is yielded
    assert [f["step"] for f in figures] == list(range(len(batches)))
    records, blocks, nbytes = _blocks(storage, local_uri)
    window = figures[-1]["window"]
    got = (window["records"], window["blocks"], window["bytes"])
    if workers == 0:
        assert got == (records, blocks, nbytes)
    else:  # a block at the edge of two workers' chunks is read by both, and counted by both
        assert all(want <= n < 2 * want for n, want in zip(got, (records, blocks, nbytes), strict=False)), got
    assert window["steps"] == len(batches)
    names = {"main"} if workers == 0 else {str(w) for w in range(workers)}
    assert set(figures[-1]["workers"]) == names
    per_worker = figures[-1]["workers"].values()
    assert sum(w["records"] for w in per_worker) == window["records"]
    assert sum(w["steps"] for w in per_worker) == len(batches)
    for stage in ("fetch_s", "verify_s", "decompress_s", "decode_s", "collate_s"):
        assert window[stage] > 0, stage
    assert sum(f["data_wait_s"] for f in figures) == pytest.approx(window["data_wait_s"])
    assert 0 < window["data_wait_s"] <= window["wall_s"]
    assert figures[-1]["slowest_rank"] is None  # no process group, no gather


def test_the_window_keeps_only_its_last_steps(local_uri: str) -> None:
    loader = _loader(TrainVault().storage, local_uri, Observability(window_steps=3))
    batches, figures = _epoch(loader)
    assert [f["window"]["steps"] for f in figures[:4]] == [1, 2, 3, 3]
    assert figures[-1]["window"]["records"] < sum(len(b) for b in batches)
    assert figures[-1]["window"]["data_wait_s"] == pytest.approx(sum(f["data_wait_s"] for f in figures[-3:]))


def test_data_wait_grows_when_storage_stalls(
    faults: ModuleType, s3_config: Callable[..., Any], s3_server: str, s3_uri: str, proxy: Any, local_uri: str
) -> None:
    vault = TrainVault(storage=s3_config(proxy.endpoint))
    window = Observability(window_steps=1000)
    clean_batches, clean = _epoch(_loader(vault.storage, s3_uri, window))
    proxy.arm(faults.Rule(mode="stall", path_contains="s1.msgpack.zst", cut_after=64, stall_s=1.5))
    stalled_batches, stalled = _epoch(_loader(vault.storage, s3_uri, window))
    assert proxy.fired == 1
    assert stalled_batches == clean_batches
    _, local = _epoch(_loader(TrainVault().storage, local_uri, window))
    waits = [f["window"]["data_wait_s"] for f in (local[-1], clean[-1], stalled[-1])]
    # Locally next to nothing; the stalled read shows as wait, and as fetch time, not decode time.
    assert waits[0] < waits[2] / 10 and waits[1] < waits[2]
    assert stalled[-1]["window"]["fetch_s"] > clean[-1]["window"]["fetch_s"]
    slowest = max(stalled, key=lambda f: f["data_wait_s"])
    assert slowest["data_wait_s"] > sum(f["data_wait_s"] for f in clean)


def test_watchdog_logs_every_stack_naming_the_stalled_read(
    faults: ModuleType, s3_config: Callable[..., Any], s3_uri: str, proxy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    vault = TrainVault(storage=s3_config(proxy.endpoint))
    clean, _ = _epoch(_loader(vault.storage, s3_uri))
    proxy.arm(faults.Rule(mode="stall", path_contains="s0.msgpack.zst", cut_after=64, stall_s=3.0))
    with caplog.at_level(logging.WARNING, logger="trainvault.loading"):
        batches, _ = _epoch(_loader(vault.storage, s3_uri, Observability(watchdog_s=0.5, on_stall="log")))
    assert batches == clean  # "log" keeps waiting, and the read completes
    dumps = [r.getMessage() for r in caplog.records if "no batch for" in r.getMessage()]
    assert dumps, "the watchdog logged nothing during a 3 s stall"
    dump = dumps[0]
    assert re.search(r"trainvault-read_\d: _/s0 \(s3://\S+/s0.msgpack.zst\) block\(s\) \d", dump)  # object, blocks
    assert "read_blocks" in dump and "get_ranges" in dump  # the stalled read's own stack
    assert "--- thread MainThread ---" in dump and "trainvault-read" in dump


def _log_to(path: str, worker_id: int) -> None:
    """worker_init_fn: the worker's trainvault.loading log into a file the test reads."""
    logging.getLogger("trainvault.loading").addHandler(logging.FileHandler(path))


def test_watchdog_raises_in_a_stalled_worker(
    faults: ModuleType, s3_config: Callable[..., Any], s3_uri: str, proxy: Any, tmp_path: Path
) -> None:
    vault = TrainVault(storage=s3_config(proxy.endpoint))
    log = tmp_path / "worker.log"
    # Every read of s0 stalls, so the first batch cannot form (its blocks may be in either run in flight).
    proxy.arm(faults.Rule(mode="stall", path_contains="s0.msgpack.zst", cut_after=64, stall_s=8.0, times=100))
    loader = _loader(
        vault.storage,
        s3_uri,
        Observability(watchdog_s=0.5, on_stall="raise"),
        num_workers=1,
        multiprocessing_context=multiprocessing.get_context("spawn"),
        worker_init_fn=functools.partial(_log_to, str(log)),
    )
    with pytest.raises(LoaderStallError, match=r"rank 0, worker 0\): no batch for .*_/s0 .*block\(s\) \d"):
        next(iter(loader))
    dump = log.read_text()
    assert "no batch for" in dump and "read_blocks" in dump and "get_ranges" in dump


def test_slowest_rank_is_gathered_every_n_steps(local_uri: str, tmp_path: Path) -> None:
    dist = torch.distributed
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        loader = _loader(TrainVault().storage, local_uri, Observability(gather_every=2))
        it = iter(loader)
        next(it)
        assert loader.figures()["slowest_rank"] is None
        next(it)
        slowest = loader.figures()["slowest_rank"]
        assert (slowest["rank"], slowest["ranks"], slowest["at_step"]) == (0, 1, 1)
        assert slowest["data_wait_s"] == pytest.approx(loader.figures()["window"]["data_wait_s"])
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "settings",
    [
        {"window_steps": 0},
        {"gather_every": -1},
        {"gather_every": True},
        {"watchdog_s": 0},
        {"watchdog_s": "5"},
        {"on_stall": "panic"},
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match=next(iter(settings))):
        Observability(**settings)


def test_observe_must_be_an_observability(local_uri: str) -> None:
    with pytest.raises(ConfigurationError, match="Observability"):
        LoaderPlan.create(observe={"watchdog_s": 5})  # type: ignore[arg-type]


def test_prometheus_export_sets_gauges_from_the_figures(local_uri: str) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")  # a dev dependency, not a trainvault one
    from trainvault.loading.export import PrometheusExport

    registry = prometheus_client.CollectorRegistry()
    export = PrometheusExport(registry)
    loader = _loader(TrainVault().storage, local_uri, Observability(window_steps=1000))
    for _ in loader:
        export(loader.figures())
    figures = loader.figures()
    value = registry.get_sample_value
    train = {"loader": "train", "rank": "0"}
    assert (
        value("trainvault_loader_window_count", {**train, "worker": "main", "what": "records"})
        == figures["window"]["records"]
    )
    assert (
        value("trainvault_loader_window_seconds", {**train, "worker": "main", "stage": "decode"})
        == figures["workers"]["main"]["decode_s"]
    )
    assert value("trainvault_loader_data_wait_seconds", train) == figures["data_wait_s"]


def test_two_loaders_export_onto_one_registry_by_name(local_uri: str) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from trainvault.loading.export import PrometheusExport

    registry = prometheus_client.CollectorRegistry()
    train, valid = PrometheusExport(registry), PrometheusExport(registry, loader="valid")
    loaders = {name: _loader(TrainVault().storage, local_uri, Observability(window_steps=1000)) for name in ("t", "v")}
    for export, loader in zip((train, valid), loaders.values(), strict=True):
        for _ in loader:
            export(loader.figures())
    text = prometheus_client.generate_latest(registry).decode()
    for name, loader in zip(("train", "valid"), loaders.values(), strict=True):
        got = registry.get_sample_value("trainvault_loader_data_wait_seconds", {"loader": name, "rank": "0"})
        assert got == loader.figures()["data_wait_s"] and f'loader="{name}"' in text
    with pytest.raises(ConfigurationError, match=r"loader 'valid' already sets trainvault_loader_\* .*its own name"):
        PrometheusExport(registry, loader="valid")
    del valid, export
    gc.collect()
    assert PrometheusExport(registry, loader="valid").loader == "valid"  # a gone export frees its name
    # A name another collector holds is refused the same way, never prometheus_client's ValueError.
    prometheus_client.Gauge("mine_data_wait_seconds", "not trainvault's", registry=registry)
    with pytest.raises(ConfigurationError, match=r"already has a metric mine_data_wait_seconds .*prefix"):
        PrometheusExport(registry, prefix="mine")


def test_prometheus_export_without_the_package_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainvault.loading.export import PrometheusExport

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if it were not installed
    with pytest.raises(ImportError, match="pip install prometheus-client"):
        PrometheusExport()


def test_block_runs_are_read_with_one_request_each(
    faults: ModuleType, s3_config: Callable[..., Any], s3_uri: str, proxy: Any
) -> None:
    """Consecutive blocks of a shard come in one coalesced ranged GET per run, not one per block."""
    from trainvault.loading.fetch import block_runs
    from trainvault.loading.iterable import SEQUENTIAL_LOOKAHEAD_BLOCKS

    vault = TrainVault(storage=s3_config(proxy.endpoint))
    records, blocks, _ = _blocks(vault.storage, s3_uri)
    manifest = vault.load_manifest(s3_uri)
    per_shard = [len(read_descriptor(vault.storage, e).blocks) for e in manifest.splits["train"].shards]
    wanted = [(s, b) for s, n in enumerate(per_shard) for b in range(n)]
    loader = _loader(vault.storage, s3_uri, Observability(window_steps=1000))
    longest = loader.split_dataset.fetcher.run_blocks(SEQUENTIAL_LOOKAHEAD_BLOCKS)
    assert longest > 1  # an object store: runs coalesce
    runs = len(list(block_runs(wanted, longest)))
    before = len(proxy.log)
    batches, figures = _epoch(loader)
    gets = [e for e in proxy.log[before:] if e["method"] == "GET" and e["target"].endswith(".msgpack.zst")]
    assert sum(len(b) for b in batches) == records and figures[-1]["window"]["blocks"] == blocks
    assert len(gets) == runs < blocks
