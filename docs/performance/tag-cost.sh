#!/bin/bash
# The server's instructions per unpipelined put, under callgrind, for each
# kind of put tag (--extensions): the slope between 2,000 and 6,000 puts,
# so that start-up does not count. Deterministic: a noisy machine gives
# the same counts. Usage: PYTHON=.venv/bin/python docs/performance/tag-cost.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
run() {  # $1 tag (a %d in it: a number per put), $2 puts: total instructions
    local port out vp
    port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
    out=$(mktemp)
    PYTHONHASHSEED=0 PYTHONPATH=src valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$PY" -m pybeanstalkd --extensions -l 127.0.0.1 -p "$port" > /dev/null 2> "$out" &
    vp=$!
    TAG="$1" python3 - "$port" "$2" <<'PYEOF'
import os, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
tag = os.environ["TAG"]
for _ in range(600):
    try:
        s = socket.create_connection(("127.0.0.1", port))
        break
    except OSError:
        time.sleep(0.1)
body = b"x" * 100
for i in range(n):
    t = (tag % i if "%" in tag else tag).encode()
    s.sendall(b"put 0 0 60 100" + t + b"\r\n" + body + b"\r\n")
    r = s.recv(100)
    assert r.startswith(b"INSERTED"), r
s.close()
PYEOF
    kill -TERM "$vp"; wait "$vp" || true
    grep Collected "$out" | awk '{print $4}'
    rm -f "$out"
}
for tag in "" " idp:key-%d" " con:api:4" " grp:batch-7" " aft:after-7" " try:3" \
           " idp:key-%d con:api:4 grp:g"; do
    a=$(run "$tag" 2000)
    b=$(run "$tag" 6000)
    echo "put${tag:- (no tag)}: $(( (b - a) / 4000 )) instructions"
done
