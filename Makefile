# All set-up happens here, from the project's own files.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv lint test test-fast test-scale docs demo ui deploy-local chromium bench bench-venv clean

venv: $(STAMP)

# torch==2.13.0 first: the CPU build; any looser spec would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# Debian's Chromium, which the UI check drives through Playwright (no Python package downloads a browser).
CHROMIUM ?= /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

chromium: $(CHROMIUM)

$(CHROMIUM):
	$(SUDO) apt-get update
	$(SUDO) apt-get install -y chromium

# The static checks, fastest first: ruff lint and format (pyproject [tool.ruff]), mypy strict on trainvault/ and the
# code location: assets/, resources/, pipelines/ (pyproject [tool.mypy]), and the import contracts
# (.importlinter: the layers, no Dagster in the library).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The static checks first (a finding fails in seconds), then every test: the library's spread over the
# machine's cores (pytest-xdist; each worker has its own S3 server), then everything else (the code location,
# the deployments, the docs) one at a time, as they share the machine's services.
# The deployment tests need PostgreSQL, Redis and RabbitMQ on 127.0.0.1 (README "Deploy").
# A PYTEST_ARGS selection (-k) may leave one half empty: pytest's "no tests collected" (5) is not a failure.
TEST_WORKERS ?= auto
test: lint $(CHROMIUM)
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests/library $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -q --ignore=tests/library $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The inner loop: the library's tests alone (no Dagster, no services), on every core.
test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests/library $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, docs/) into site/; strict: a broken link, a page left out of the nav
# or an API reference that does not resolve fails the build (tests/docs/test_readme.py builds it in `make test` too).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# tests/deploy/test_deploy_scale.py alone (`make test` runs it too): 10,000 shard partitions through the Celery
# deployment as one backfill; it prints the location's load, backfill and UI render times.
# TRAINVAULT_SCALE_SHARDS=20 make test-scale runs it at 64 shards.
test-scale: $(STAMP) $(CHROMIUM)
	$(PY) -m pytest -q -s tests/deploy/test_deploy_scale.py $(PYTEST_ARGS)

# The Dagster instance lives in the project (.dagster_home/, telemetry off, no "Join the Dagster community"
# modal over the UI's first page), never in ~/.dagster; made when missing (pipelines/examples/demo.py writes the same).
DAGSTER_HOME_DIR ?= $(CURDIR)/.dagster_home
UI_PORT ?= 3000

$(DAGSTER_HOME_DIR)/dagster.yaml:
	mkdir -p $(DAGSTER_HOME_DIR)
	printf 'telemetry:\n  enabled: false\nnux:\n  enabled: false\n' > $@

# Every dataset of pipelines/datasets.yaml through its lifecycle job (a run launched through the code location
# workspace.yaml loads, so the UI's timeline and Jobs pages show it), then a
# trainer opens each approval. TRAINVAULT_DEMO_PLANT=1 make demo: evaluation items planted into
# demo_curriculum, approved with them excluded (the trainer never sees them); with
# TRAINVAULT_DEMO_EXCLUSIONS=0 too, its check fails and it gets no approval.
demo: $(STAMP) $(DAGSTER_HOME_DIR)/dagster.yaml
	DAGSTER_HOME=$(DAGSTER_HOME_DIR) $(PY) -m pipelines.examples.demo

# The Dagster UI (webserver + daemon) on http://127.0.0.1:$(UI_PORT), same instance as the demo;
# TRAINVAULT_DATASETS=other.yaml make ui serves another dataset catalog. A taken port fails at once.
# Dagster's event settings for runs over many shards: pipelines.definitions.DEPLOYMENT_ENV.
ui: $(STAMP) $(DAGSTER_HOME_DIR)/dagster.yaml
	pipelines/deploy/check-ports.sh UI_PORT=$(UI_PORT)
	DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=1 DAGSTER_EVENT_BATCH_SIZE=1000 DAGSTER_HOME=$(DAGSTER_HOME_DIR) $(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p $(UI_PORT)

# The Celery deployment on this machine's PostgreSQL and RabbitMQ (README "Deploy"): code server,
# two dagster-celery workers (restarted when one dies), daemon and webserver on
# http://127.0.0.1:$(UI_PORT), steps through its own RabbitMQ vhost; Ctrl-C stops them.
CODE_PORT ?= 4266
deploy-local: $(STAMP)
	VENV=$(VENV) UI_PORT=$(UI_PORT) CODE_PORT=$(CODE_PORT) pipelines/deploy/local.sh

# Benchmarks run in their own venv: the peers pin numpy<2.2 and pull packages the
# project's own venv must not carry.
BENCH_VENV ?= .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed

bench-venv: $(BENCH_STAMP)

# torch==2.13.0 first (the CPU wheel); the constraint keeps every later install off CUDA builds.
$(BENCH_STAMP): pyproject.toml bench/requirements.txt bench/constraints.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --upgrade pip
	$(BENCH_PY) -m pip install --quiet "torch==2.13.0"
	$(BENCH_PY) -m pip install --quiet -c bench/constraints.txt -e ".[torch,parquet,contamination]"
	$(BENCH_PY) -m pip install --quiet -c bench/constraints.txt -r bench/requirements.txt
	touch $(BENCH_STAMP)

# bench/run.py runs every bench/*.py that has a main; pass options with BENCH_ARGS="--records 50000".
bench: $(BENCH_STAMP)
	$(BENCH_PY) bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info site
