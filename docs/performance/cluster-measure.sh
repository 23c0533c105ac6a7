#!/bin/bash
# usage: measure.sh FSYNC_FLAG(-f0|-f50) [bench|bsload] -> lines for: cluster via haproxy,
# cluster straight to the leader, single node, reference (the code from /tmp/snap)
set -u
F=$1
LOAD=${2:-bench}
cd /work/main
B() { PYTHONPATH=/tmp/snap/src .venv/bin/python -c "import sys; from pybeanstalkd.bench.main import main; sys.exit(main())" "$@"; }
[ -x /tmp/bsload ] || gcc -O2 -pthread -o /tmp/bsload ../shared/tools/bsload.c
L() {  # 20,000 puts of 100 bytes from 64 unpipelined producers to port $1
  if [ "$LOAD" = bsload ]; then /tmp/bsload -p $1 -m put -c 64 -n 20000 -s 100 2>&1 | tail -1
  else B -p $1 -w put -c 64 -n 20000 -q --procs 2 | tail -1; fi
}
rm -rf /tmp/m && mkdir -p /tmp/m/{etcd,n1,n2,n3,single,ref}
etcd --name n1 --data-dir /tmp/m/etcd --listen-client-urls http://127.0.0.1:23791 --advertise-client-urls http://127.0.0.1:23791 --listen-peer-urls http://127.0.0.1:23801 --initial-advertise-peer-urls http://127.0.0.1:23801 --initial-cluster n1=http://127.0.0.1:23801 > /tmp/m/etcd.log 2>&1 &
EP=$!
sleep 2
for i in 1 2 3; do
  PYTHONPATH=/tmp/snap/src .venv/bin/python -m pybeanstalkd -l 127.0.0.1 -p 1130$i -b /tmp/m/n$i $F --http 127.0.0.1:800$i --cluster m --etcd 127.0.0.1:23791 --node node$i --peer-listen 127.0.0.1:700$i > /tmp/m/n$i.log 2>&1 &
  eval P$i=$!
  sleep 1.5
done
sed 's/bind 127.0.0.1:11300/bind 127.0.0.1:11399/' examples/haproxy.cfg > /tmp/m/h.cfg
haproxy -db -f /tmp/m/h.cfg > /tmp/m/haproxy.log 2>&1 &
HP=$!
sleep 3
grep -h "isr\|leads" /tmp/m/n*.log | tail -3
echo "cluster $F via haproxy:"; L 11399
echo "cluster $F direct to the leader:"; L 11301
for p in $P1 $P2 $P3 $HP $EP; do awk -v p=$p '{print "pid", p, "cpu s", ($14+$15)/100}' /proc/$p/stat; done
curl -s 127.0.0.1:8001/api/v1/cluster | python3 -c "import json,sys; print('batches shipped', json.load(sys.stdin).get('seq'))"
kill $HP $P1 $P2 $P3; sleep 1; kill $EP
PYTHONPATH=/tmp/snap/src .venv/bin/python -m pybeanstalkd -l 127.0.0.1 -p 11398 -b /tmp/m/single $F > /dev/null 2>&1 &
SP=$!; sleep 1
echo "single node $F:"; L 11398
kill $SP
beanstalkd -l 127.0.0.1 -p 11397 -b /tmp/m/ref $F &
RP=$!; sleep 0.5
echo "reference $F:"; L 11397
kill $RP
wait 2>/dev/null
