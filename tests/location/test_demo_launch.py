"""How `make demo` launches its runs (pipelines/examples/launch.py): created through the code location
workspace.yaml loads, so each carries that location's origin, and each bad input refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

dg = pytest.importorskip("dagster")

from pipelines.examples.demo import materialize_all  # noqa: E402
from pipelines.examples.launch import code_location, create_run, run_worker_command  # noqa: E402
from trainvault import ConfigurationError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_created_through_the_location_carries_its_origin_and_its_worker_command(tmp_path) -> None:
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        with code_location(instance, ROOT / "workspace.yaml") as location:
            run = create_run(instance, location, "lifecycle_demo_text", {"demo": "yes"})
            with pytest.raises(ConfigurationError, match="has no job 'lifecycle_nope': check the dataset catalog"):
                create_run(instance, location, "lifecycle_nope", {})
        stored = instance.get_run_by_id(run.run_id)
        assert stored is not None and stored.status == dg.DagsterRunStatus.NOT_STARTED
        assert stored.remote_job_origin is not None and stored.remote_job_origin.location_name == "trainvault"
        assert stored.tags["demo"] == "yes" and stored.job_name == "lifecycle_demo_text"
        command = run_worker_command(instance, stored)
        assert command[1:5] == ["-m", "dagster", "api", "execute_run"] and Path(command[0]).exists()
        with pytest.raises(ConfigurationError, match="has no code origin: create it with create_run"):
            run_worker_command(instance, dg.DagsterRun(job_name="lifecycle_demo_text"))


def test_a_workspace_without_the_location_or_whose_location_fails_is_refused_by_name(tmp_path) -> None:
    broken = tmp_path / "workspace.yaml"
    broken.write_text(
        "load_from:\n  - python_module:\n      module_name: no_such_module_here\n"
        f"      working_directory: {tmp_path}\n      location_name: trainvault\n"
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        with (
            pytest.raises(ConfigurationError, match="code location 'trainvault' failed to load: "),
            code_location(instance, broken),
        ):
            pass
        with (
            pytest.raises(ConfigurationError, match=r"no code location 'other' \(it loads: trainvault\)"),
            code_location(instance, broken, name="other"),
        ):
            pass


def test_the_demo_refuses_runs_without_an_instance_to_record_into(tmp_path) -> None:
    with pytest.raises(ConfigurationError, match="need DAGSTER_HOME in their environment"):
        materialize_all([], {"PATH": "/usr/bin"}, tmp_path)
