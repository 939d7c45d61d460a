#!/usr/bin/env bash
# rabbitmq-vhost.sh add NAME: RabbitMQ vhost NAME on this machine (made if missing, guest may use
# it); prints its broker URL. rabbitmq-vhost.sh delete NAME: deletes it, queues and all.
# One vhost per deployment: another deployment on the same broker never takes its steps.
set -euo pipefail
[ $# = 2 ] || { echo "usage: $0 add|delete VHOST" >&2; exit 2; }
action=$1 vhost=$2
if ! command -v rabbitmqctl >/dev/null; then
    echo "error: rabbitmqctl not found, so the vhost '$vhost' cannot be made or deleted: run this where RabbitMQ runs, or set TRAINVAULT_CELERY_BROKER to an amqp:// URL whose vhost exists" >&2
    exit 1
fi
case $action in
    add)
        rabbitmqctl -q add_vhost "$vhost"
        rabbitmqctl -q set_permissions -p "$vhost" guest '.*' '.*' '.*'
        echo "amqp://guest:guest@127.0.0.1:5672/$vhost" ;;
    delete)
        rabbitmqctl -q delete_vhost "$vhost" ;;
    *)
        echo "usage: $0 add|delete VHOST" >&2
        exit 2 ;;
esac
