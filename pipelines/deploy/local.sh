#!/usr/bin/env bash
# `make deploy-local`: the Celery deployment on this machine's services, in the foreground.
# A code server (port ${CODE_PORT:-4266}), two dagster-celery workers, dagster-daemon and
# dagster-webserver (http://127.0.0.1:${UI_PORT:-3000}) on a Postgres instance, steps through
# the deployment's own RabbitMQ vhost. A worker that exits is started again (its unfinished step
# goes to the other worker); any other process exiting, or Ctrl-C, stops them all.
# The same processes and settings as tests/deploy/test_deploy_celery.py; README "Deploy" explains each.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$(cd "${VENV:-.venv}/bin" && pwd):$PATH"
UI_PORT=${UI_PORT:-3000} CODE_PORT=${CODE_PORT:-4266}
pipelines/deploy/check-ports.sh "UI_PORT=$UI_PORT" "CODE_PORT=$CODE_PORT"

export DAGSTER_HOME=${DAGSTER_HOME:-$PWD/.dagster_home_deploy}
export DAGSTER_PG_USER=${DAGSTER_PG_USER:-postgres} DAGSTER_PG_PASSWORD=${DAGSTER_PG_PASSWORD:-}
export DAGSTER_PG_HOST=${DAGSTER_PG_HOST:-127.0.0.1} DAGSTER_PG_DB=${DAGSTER_PG_DB:-trainvault}
export TRAINVAULT_EXECUTOR=celery
# pipelines.definitions.DEPLOYMENT_ENV: one "planned" event per asset for a run over a range of shards,
# a step's per-partition materializations stored 1,000 to a database write.
export DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=1 DAGSTER_EVENT_BATCH_SIZE=1000
# The deployment's own vhost (named after its database): another deployment on the same broker
# never takes its steps. A broker URL given in TRAINVAULT_CELERY_BROKER is used as it is.
VHOST=${TRAINVAULT_CELERY_VHOST:-$DAGSTER_PG_DB}
if [ -z "${TRAINVAULT_CELERY_BROKER:-}" ]; then
    broker=$(pipelines/deploy/rabbitmq-vhost.sh add "$VHOST")
    export TRAINVAULT_CELERY_BROKER=$broker
fi

mkdir -p "$DAGSTER_HOME"
cp pipelines/deploy/dagster-celery.yaml "$DAGSTER_HOME/dagster.yaml"
WORKSPACE=$DAGSTER_HOME/workspace.yaml
sed "s/port: 4266/port: $CODE_PORT/" pipelines/deploy/workspace.yaml > "$WORKSPACE"
# The instance's database (run, event log and schedule storage), created once, with its tables
# (made here once, not by five processes racing to make them).
python - <<'PY'
import os, psycopg2
from dagster import DagsterInstance
conn = psycopg2.connect(host=os.environ["DAGSTER_PG_HOST"], user=os.environ["DAGSTER_PG_USER"],
                        password=os.environ["DAGSTER_PG_PASSWORD"] or None, dbname="postgres", connect_timeout=5)
conn.autocommit = True
cur = conn.cursor()
cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (os.environ["DAGSTER_PG_DB"],))
if cur.fetchone() is None:
    cur.execute(f'CREATE DATABASE "{os.environ["DAGSTER_PG_DB"]}"')
DagsterInstance.get().dispose()
PY

# The demo catalog's approver and scanner key pairs (.demo/keys/), made once, as `make demo` does.
python -c 'from pipelines.catalog import datasets_path, load_datasets
from pipelines.examples.demo import prepare_keys
prepare_keys(load_datasets(datasets_path()))'

declare -A pid_of name_of started_at
start() {
    # $1 names the process. Each runs in its own session, so stopping its group stops its
    # children too; SIGINT restored, which a shell leaves ignored in background jobs (Dagster stops on it).
    local name=$1; shift
    setsid python -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' "$@" &
    pid_of[$name]=$! name_of[$!]=$name started_at[$name]=$SECONDS
}
start_worker() {
    # Named after the vhost (w1.trainvault@host): a step's engine event says which deployment ran it.
    start "$1" dagster-celery worker start -A pipelines.celery_app -n "$1.$VHOST" -y pipelines/deploy/celery-worker.yaml \
        -- --concurrency=1 --without-gossip --without-mingle
}
stop() {
    trap - EXIT INT TERM
    for pid in "${pid_of[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for _ in $(seq 20); do
        alive=0
        for pid in "${pid_of[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && return
        sleep 0.5
    done
    for pid in "${pid_of[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
}
trap stop EXIT
trap 'stop; exit 130' INT TERM

start code-server dagster code-server start -m pipelines.definitions -h 127.0.0.1 -p "$CODE_PORT" --location-name trainvault
start_worker w1
start_worker w2
# The webserver and the daemon load the location from the code server: they start once it answers.
deadline=$((SECONDS + 300))
until (exec 3<>"/dev/tcp/127.0.0.1/$CODE_PORT") 2>/dev/null && dagster api grpc-health-check -h 127.0.0.1 -p "$CODE_PORT" >/dev/null 2>&1; do
    # An exited child stays a zombie until waited for: its state, not kill -0, says it is gone.
    state=$(ps -o stat= -p "${pid_of[code-server]}" || true)
    [[ -n $state && $state != Z* ]] || { echo "error: the code server exited before it answered (see its output above)" >&2; exit 1; }
    [ "$SECONDS" -lt "$deadline" ] || { echo "error: the code server did not answer on 127.0.0.1:$CODE_PORT within 300 s" >&2; exit 1; }
    sleep 1
done
start daemon dagster-daemon run -w "$WORKSPACE"
start webserver dagster-webserver -w "$WORKSPACE" -h 127.0.0.1 -p "$UI_PORT"

while true; do
    exited=
    wait -n -p exited || true
    [ -n "$exited" ] || continue
    name=${name_of[$exited]}
    case $name in
        w1|w2)
            # Its group too: a worker whose wrapper was killed leaves Celery's own processes behind.
            kill -KILL -- "-$exited" 2>/dev/null || true
            if [ $((SECONDS - started_at[$name])) -lt 10 ]; then
                echo "error: worker $name exited within 10 s of starting; not restarting it (see its output above)" >&2
                exit 1
            fi
            echo "local.sh: worker $name (pid $exited) exited; starting it again (a step it held is redelivered)" >&2
            unset "name_of[$exited]"
            start_worker "$name" ;;
        *)
            echo "local.sh: $name (pid $exited) exited; stopping the deployment" >&2
            exit 1 ;;
    esac
done
