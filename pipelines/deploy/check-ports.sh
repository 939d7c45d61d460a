#!/usr/bin/env bash
# check-ports.sh VAR=PORT...: fail at once, naming the variable, when a 127.0.0.1 port is taken,
# before anything is started (a server that cannot bind would otherwise print "Serving" and hang).
set -euo pipefail
for pair in "$@"; do
    var=${pair%%=*} port=${pair#*=}
    if ! python3 - "$port" <<'PY'
import socket, sys
with socket.socket() as sock:
    # As the servers bind: a port left in TIME_WAIT by a stopped server counts as free.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", int(sys.argv[1])))
    except OSError:
        sys.exit(1)
PY
    then
        echo "error: port $port on 127.0.0.1 ($var) is taken by another process: stop it, or set $var to a free port (e.g. $var=$((port + 1)))" >&2
        exit 1
    fi
done
