#!/usr/bin/env bash
# `make deploy-local`: the Celery deployment on this machine's services, in the foreground.
# A code server (port 4266), two dagster-celery workers, dagster-daemon and dagster-webserver
# (http://127.0.0.1:${UI_PORT:-3000}) on a Postgres instance; Ctrl-C stops them all.
# The same processes and settings as tests/test_deploy_celery.py; README "Deploy" explains each.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$(cd "${VENV:-.venv}/bin" && pwd):$PATH"

export DAGSTER_HOME=${DAGSTER_HOME:-$PWD/.dagster_home_deploy}
export DAGSTER_PG_USER=${DAGSTER_PG_USER:-postgres} DAGSTER_PG_PASSWORD=${DAGSTER_PG_PASSWORD:-}
export DAGSTER_PG_HOST=${DAGSTER_PG_HOST:-127.0.0.1} DAGSTER_PG_DB=${DAGSTER_PG_DB:-trainvault}
export TRAINVAULT_EXECUTOR=celery
export TRAINVAULT_CELERY_BROKER=${TRAINVAULT_CELERY_BROKER:-amqp://guest:guest@127.0.0.1:5672//}

mkdir -p "$DAGSTER_HOME"
cp pipelines/deploy/dagster-celery.yaml "$DAGSTER_HOME/dagster.yaml"
# The instance's database (run, event log and schedule storage), created once.
python - <<'PY'
import os, psycopg2
conn = psycopg2.connect(host=os.environ["DAGSTER_PG_HOST"], user=os.environ["DAGSTER_PG_USER"],
                        password=os.environ["DAGSTER_PG_PASSWORD"] or None, dbname="postgres", connect_timeout=5)
conn.autocommit = True
cur = conn.cursor()
cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (os.environ["DAGSTER_PG_DB"],))
if cur.fetchone() is None:
    cur.execute(f'CREATE DATABASE "{os.environ["DAGSTER_PG_DB"]}"')
PY

# The demo catalog's approver and scanner key pairs (.demo/keys/), made once, as `make demo` does.
python -c 'from pipelines.catalog import datasets_path, load_datasets
from pipelines.examples.demo import prepare_keys
prepare_keys(load_datasets(datasets_path()))'

pids=()
start() {
    # Each process in its own session, so stopping its group stops its children too; SIGINT
    # restored, which a shell leaves ignored in background jobs (Dagster stops on it).
    setsid python -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' "$@" &
    pids+=("$!")
}
stop() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for _ in $(seq 20); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && return
        sleep 0.5
    done
    for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
}
trap stop EXIT INT TERM

start dagster code-server start -m pipelines.definitions -h 127.0.0.1 -p 4266 --location-name trainvault
for name in w1 w2; do
    start dagster-celery worker start -A dagster_celery.app -n "$name" -y pipelines/deploy/celery-worker.yaml \
        -- --concurrency=1 --without-gossip --without-mingle
done
start dagster-daemon run -w pipelines/deploy/workspace.yaml
start dagster-webserver -w pipelines/deploy/workspace.yaml -h 127.0.0.1 -p "${UI_PORT:-3000}"
wait -n
