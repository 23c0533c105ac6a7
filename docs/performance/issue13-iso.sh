#!/bin/bash
# leader-direct throughput and CPU per put with 1, 2, 3 nodes (NODES="1 2 3"), and one node alone;
# F=-f0 by default; runs the code of /tmp/snap (git archive HEAD)
cd /work/main
F=${F:--f0}
B() { PYTHONPATH=/tmp/snap/src .venv/bin/python -c "import sys; from pybeanstalkd.bench.main import main; sys.exit(main())" "$@"; }
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
rm -rf /tmp/i && mkdir -p /tmp/i/{etcd,n1,n2,n3,s}
etcd --name n1 --data-dir /tmp/i/etcd --listen-client-urls http://127.0.0.1:23792 --advertise-client-urls http://127.0.0.1:23792 --listen-peer-urls http://127.0.0.1:23802 --initial-advertise-peer-urls http://127.0.0.1:23802 --initial-cluster n1=http://127.0.0.1:23802 --unsafe-no-fsync > /tmp/i/etcd.log 2>&1 &
EP=$!; sleep 2
PYTHONPATH=/tmp/snap/src .venv/bin/python -m pybeanstalkd -l 127.0.0.1 -p 11380 -b /tmp/i/s $F > /dev/null 2>&1 & SP=$!; sleep 1
c=$(cpu $SP); B -p 11380 -w put -c 64 -n 20000 -q --procs 2 | tail -1 | awk '{printf "single: %s/s ", $4}'; echo "cpu $(( ($(cpu $SP)-c)*10000/20000 )) us/put"; kill $SP
PIDS=""
for i in ${NODES:-1 2 3}; do
  PYTHONPATH=/tmp/snap/src .venv/bin/python -m pybeanstalkd -l 127.0.0.1 -p 1138$i -b /tmp/i/n$i $F --cluster i --etcd 127.0.0.1:23792 --node n$i --peer-listen 127.0.0.1:710$i > /tmp/i/n$i.log 2>&1 &
  PIDS="$PIDS $!"; eval P$i=$!
  sleep 2.5
  c=$(cpu $P1); B -p 11381 -w put -c 64 -n 20000 -q --procs 2 | tail -1 | awk -v n=$i '{printf "cluster of %d: %s/s ", n, $4}'; echo "leader cpu $(( ($(cpu $P1)-c)*10000/20000 )) us/put"
done
kill $PIDS; sleep 0.5; kill $EP
