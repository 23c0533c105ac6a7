#!/bin/bash
# usage: cluster-f0-ab.sh REV_A REV_B ROUNDS [PUTS]
# Alternates REV_A and REV_B (git revisions of this repo); for each: a 3-node
# -f0 cluster (one etcd, HAProxy from examples/haproxy.cfg), 64 unpipelined
# producers from bsload (../shared/tools/bsload.c) through HAProxy, then one
# node alone with -f0 under the same load. Prints puts/s of both, the
# batches shipped, each process's CPU seconds (user/sys) and voluntary
# context switches over the cluster run, and the machine's busy share.
set -u
A=$1; B=$2; ROUNDS=$3; N=${4:-30000}
cd "$(dirname "$0")/../.."
REPO=$PWD
BSLOAD=/tmp/bsload
[ -x $BSLOAD ] || gcc -O2 -pthread -o $BSLOAD "$REPO/../shared/tools/bsload.c"
for rev in $A $B; do
  rm -rf /tmp/ab-$rev && mkdir -p /tmp/ab-$rev && git archive $rev | tar -x -C /tmp/ab-$rev
done
cpu() { for p in "$@"; do awk '{printf "%.2f/%.2f ", $14/100, $15/100}' /proc/$p/stat; done; }
ctx() { for p in "$@"; do cat /proc/$p/task/*/status | awk '/^voluntary_ctxt_switches/{s+=$2} END{printf "%d ", s}'; done; }
one() {  # one() SRC
  S=$1
  rm -rf /tmp/ab && mkdir -p /tmp/ab/{etcd,n1,n2,n3,single}
  etcd --name n1 --data-dir /tmp/ab/etcd --listen-client-urls http://127.0.0.1:23791 --advertise-client-urls http://127.0.0.1:23791 --listen-peer-urls http://127.0.0.1:23801 --initial-advertise-peer-urls http://127.0.0.1:23801 --initial-cluster n1=http://127.0.0.1:23801 > /tmp/ab/etcd.log 2>&1 &
  EP=$!; sleep 2
  PIDS=""
  for i in 1 2 3; do
    PYTHONPATH=$S $REPO/.venv/bin/python -m pybeanstalkd -l 127.0.0.1 -p 1130$i -b /tmp/ab/n$i -f0 --http 127.0.0.1:800$i --cluster ab --etcd 127.0.0.1:23791 --node node$i --peer-listen 127.0.0.1:700$i > /tmp/ab/n$i.log 2>&1 &
    PIDS="$PIDS $!"; sleep 1.5
  done
  sed 's/bind 127.0.0.1:11300/bind 127.0.0.1:11399/' $REPO/examples/haproxy.cfg > /tmp/ab/h.cfg
  haproxy -db -f /tmp/ab/h.cfg > /tmp/ab/haproxy.log 2>&1 &
  HP=$!; sleep 3
  c0=$(cpu $PIDS $HP); x0=$(ctx $PIDS $HP); s0=$(head -1 /proc/stat)
  r=$($BSLOAD -p 11399 -m put -c 64 -n $N -s 100 2>&1 | tail -1)
  c1=$(cpu $PIDS $HP); x1=$(ctx $PIDS $HP); s1=$(head -1 /proc/stat)
  seq=$(curl -s 127.0.0.1:8001/api/v1/cluster | python3 -c "import json,sys; print(json.load(sys.stdin).get('seq'))")
  echo "  cluster: $r batches=$seq"
  echo "  cpu s (node1 node2 node3 haproxy) before: $c0 after: $c1"
  echo "  voluntary ctx switches before: $x0 after: $x1"
  echo "$s0 $s1" | awk '{u=$13+$14+$15+$18+$19-$2-$3-$4-$7-$8; i=$16+$17-$5-$6; printf "  machine busy %.0f%%\n", 100*u/(u+i)}'
  kill $HP $PIDS; sleep 1; kill $EP; wait 2>/dev/null
  PYTHONPATH=$S $REPO/.venv/bin/python -m pybeanstalkd -l 127.0.0.1 -p 11398 -b /tmp/ab/single -f0 > /dev/null 2>&1 &
  SP=$!; sleep 1
  echo "  one node: $($BSLOAD -p 11398 -m put -c 64 -n $N -s 100 2>&1 | tail -1)"
  kill $SP; wait 2>/dev/null
}
for round in $(seq $ROUNDS); do
  for rev in $A $B; do
    echo "round $round, $rev:"
    one /tmp/ab-$rev/src
  done
done
