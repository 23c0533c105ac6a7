#!/bin/sh
# A cluster of three pybeanstalkd nodes behind HAProxy, on this machine, in
# a temporary directory: a job put through HAProxy survives kill -9 of the
# leader, and the next leader serves it. Needs `make install` (it runs
# .venv/bin/pybeanstalkd and .venv/bin/pybeanstalkd-admin), etcd, haproxy
# and curl. Every port may be given in the environment; the defaults below.
set -eu

BS_PORT=${BS_PORT:-11300}                    # HAProxy: where clients connect
ETCD_CLIENT_PORT=${ETCD_CLIENT_PORT:-2379}   # etcd: where the nodes reach it
ETCD_PEER_PORT=${ETCD_PEER_PORT:-2380}       # etcd: its members' port
NODE1_PORT=${NODE1_PORT:-11301} NODE1_HTTP=${NODE1_HTTP:-8001} NODE1_PEER=${NODE1_PEER:-7001}
NODE2_PORT=${NODE2_PORT:-11302} NODE2_HTTP=${NODE2_HTTP:-8002} NODE2_PEER=${NODE2_PEER:-7002}
NODE3_PORT=${NODE3_PORT:-11303} NODE3_HTTP=${NODE3_HTTP:-8003} NODE3_PEER=${NODE3_PEER:-7003}
# examples/haproxy.cfg reads these from the environment
export BS_PORT NODE1_PORT NODE1_HTTP NODE2_PORT NODE2_HTTP NODE3_PORT NODE3_HTTP

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VENV_BIN:-$REPO/.venv/bin}   # where pybeanstalkd and pybeanstalkd-admin are
DIR=$(mktemp -d)   # etcd's data, the nodes' binlogs (-b), every log
PIDS=""
cleanup() {
    kill $PIDS 2>/dev/null || true
    wait
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {  # say what went wrong, show the logs, and stop (exit 1)
    echo "FAILED: $*" >&2
    for log in "$DIR"/*.log; do
        [ -s "$log" ] && { echo "-- $log (last lines)" >&2; tail -n 5 "$log" >&2; }
    done
    exit 1
}
retry() {  # run "$@" until it succeeds, for up to 30 s
    tries=0
    until "$@"; do
        tries=$((tries + 1))
        if [ "$tries" -ge 150 ]; then fail "gave up after 30 s: $*"; fi
        sleep 0.2
    done
}
port_free() {  # nothing answers on 127.0.0.1:$2 (curl: 7, connection refused)
    rc=0
    curl -s -o /dev/null --connect-timeout 1 --max-time 1 "http://127.0.0.1:$2/" || rc=$?
    [ "$rc" -eq 7 ] || fail "$1=$2: something already listens on 127.0.0.1:$2 (a \
server left from \`make run\`?); stop it, or give another port: $1=NNNN $0"
}
alive() {  # $2 (a pid) still runs: $1 names it
    kill -0 "$2" 2>/dev/null || fail "$1 exited; its log is above"
}
leads() {  # GET /leader answers 200 on the leader only (HAProxy's check)
    curl -sf -o /dev/null "http://127.0.0.1:$1/leader"
}
all_in_sync() {  # the leader lists all three in its in-sync replicas
    curl -sf "http://127.0.0.1:$NODE1_HTTP/leader" | grep '"node2"' | grep -q '"node3"'
}
admin() {  # the admin CLI, through HAProxy
    "$BIN/pybeanstalkd-admin" -p "$BS_PORT" "$@" 2>/dev/null
}

for var in BS_PORT ETCD_CLIENT_PORT ETCD_PEER_PORT NODE1_PORT NODE1_HTTP NODE1_PEER \
           NODE2_PORT NODE2_HTTP NODE2_PEER NODE3_PORT NODE3_HTTP NODE3_PEER; do
    eval "port_free $var \$$var"
done

echo "== etcd on 127.0.0.1:$ETCD_CLIENT_PORT"
etcd --name etcd1 --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "etcd1=http://127.0.0.1:$ETCD_PEER_PORT" >"$DIR/etcd.log" 2>&1 &
PIDS="$PIDS $!"
retry curl -sf -o /dev/null "http://127.0.0.1:$ETCD_CLIENT_PORT/health"

echo "== node1, node2, node3 (node1 first: it leads)"
mkdir "$DIR/node1" "$DIR/node2" "$DIR/node3"
"$BIN/pybeanstalkd" -l 127.0.0.1 -p "$NODE1_PORT" -b "$DIR/node1" -f0 \
    --http "127.0.0.1:$NODE1_HTTP" --cluster jobs --etcd "127.0.0.1:$ETCD_CLIENT_PORT" \
    --node node1 --peer-listen "127.0.0.1:$NODE1_PEER" >"$DIR/node1.log" 2>&1 &
NODE1_PID=$!
PIDS="$PIDS $NODE1_PID"
retry leads "$NODE1_HTTP"
"$BIN/pybeanstalkd" -l 127.0.0.1 -p "$NODE2_PORT" -b "$DIR/node2" -f0 \
    --http "127.0.0.1:$NODE2_HTTP" --cluster jobs --etcd "127.0.0.1:$ETCD_CLIENT_PORT" \
    --node node2 --peer-listen "127.0.0.1:$NODE2_PEER" >"$DIR/node2.log" 2>&1 &
PIDS="$PIDS $!"
"$BIN/pybeanstalkd" -l 127.0.0.1 -p "$NODE3_PORT" -b "$DIR/node3" -f0 \
    --http "127.0.0.1:$NODE3_HTTP" --cluster jobs --etcd "127.0.0.1:$ETCD_CLIENT_PORT" \
    --node node3 --peer-listen "127.0.0.1:$NODE3_PEER" >"$DIR/node3.log" 2>&1 &
PIDS="$PIDS $!"
retry all_in_sync
curl -s "http://127.0.0.1:$NODE1_HTTP/leader"; echo

echo "== HAProxy on 127.0.0.1:$BS_PORT"
haproxy -db -f "$REPO/examples/haproxy.cfg" >"$DIR/haproxy.log" 2>&1 &
HAPROXY_PID=$!
PIDS="$PIDS $HAPROXY_PID"
# (until HAProxy's first checks, a connection may reach a follower, which closes it)
ID=$(retry admin put demo "hello, cluster")
alive HAProxy "$HAPROXY_PID"
# The leader holds it: the put went through HAProxy to the cluster.
curl -sf "http://127.0.0.1:$NODE1_HTTP/api/v1/jobs/$ID" | grep -q '"hello, cluster"' \
    || fail "job $ID is not on the leader, node1: the put did not reach the cluster"
echo "put job $ID through HAProxy"

echo "== kill -9 of the leader, node1"
kill -9 "$NODE1_PID"
# HAProxy sends clients on once another node leads: the lease's 3 s, and a check
JOB=$(retry admin peek demo --json)
echo "$JOB" | grep -q "\"id\": $ID," && echo "$JOB" | grep -q '"body": "hello, cluster"' \
    || fail "after the failover, the peek through HAProxy did not find job $ID: $JOB"
echo "job $ID is still there, through HAProxy"
NEW_LEADER_HTTP=""
for http in "$NODE2_HTTP" "$NODE3_HTTP"; do
    if leads "$http"; then curl -s "http://127.0.0.1:$http/leader"; echo; NEW_LEADER_HTTP=$http; fi
done
[ -n "$NEW_LEADER_HTTP" ] || fail "neither node2 nor node3 leads"
ID2=$(retry admin put demo "after the failover")
curl -sf "http://127.0.0.1:$NEW_LEADER_HTTP/api/v1/jobs/$ID2" | grep -q '"after the failover"' \
    || fail "job $ID2 is not on the new leader"
echo "put job $ID2 through HAProxy, to the new leader"

echo "== HAProxy's view: the followers' checks answer 503, so they are DOWN (expected)"
grep -E "is (UP|DOWN)" "$DIR/haproxy.log" || true
echo "== the nodes' own words"
grep -h "Z cluster jobs" "$DIR/node2.log" "$DIR/node3.log" | sort -s -k1,1  # in time order
