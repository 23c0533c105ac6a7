"""A follower joins a leader (-f0) holding N jobs of 100 bytes; a probe puts
every 2 ms on the leader and records each put's latency. Prints the worst and
p99 during the join, and how long until the follower is in the ISR.
usage: cluster-join.py SRC_DIR N  (SRC_DIR: a `git archive` of the code to run)"""
import json, os, socket, subprocess, sys, threading, time, urllib.request
src, N = sys.argv[1], int(sys.argv[2])
env = dict(os.environ, PYTHONPATH=src + "/src")
py = "/work/main/.venv/bin/python"
base = "/tmp/j"
subprocess.run(["rm", "-rf", base]); os.makedirs(base + "/etcd"); os.makedirs(base + "/n1"); os.makedirs(base + "/n2")
etcd = subprocess.Popen(["etcd", "--name", "n1", "--data-dir", base + "/etcd", "--listen-client-urls", "http://127.0.0.1:23793",
    "--advertise-client-urls", "http://127.0.0.1:23793", "--listen-peer-urls", "http://127.0.0.1:23803",
    "--initial-advertise-peer-urls", "http://127.0.0.1:23803", "--initial-cluster", "n1=http://127.0.0.1:23803",
    "--unsafe-no-fsync"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(2)
def node(i):
    return subprocess.Popen([py, "-m", "pybeanstalkd", "-l", "127.0.0.1", "-p", "1137%d" % i, "-b", base + "/n%d" % i, "-f0",
        "--http", "127.0.0.1:806%d" % i, "--cluster", "j", "--etcd", "127.0.0.1:23793", "--node", "n%d" % i,
        "--peer-listen", "127.0.0.1:720%d" % i], env=env, stdout=open(base + "/n%d.log" % i, "w"), stderr=subprocess.STDOUT)
n1 = node(1); time.sleep(2.5)
fill = socket.create_connection(("127.0.0.1", 11371))
body = b"x" * 100
for k in range(0, N, 2000):
    fill.sendall(b"put 0 0 60 100\r\n%s\r\n" % body * 2000)
    got = b""
    while got.count(b"\r\n") < 2000:
        got += fill.recv(1 << 20)
fill.close()
def isr():
    with urllib.request.urlopen("http://127.0.0.1:8061/leader", timeout=5) as r:
        return json.loads(r.read())["isr"]
def jobs_held():
    s = socket.create_connection(("127.0.0.1", 11371)); s.sendall(b"stats\r\n"); time.sleep(0.2)
    d = s.recv(65536).decode(); s.close()
    return int(d.split("current-jobs-ready: ")[1].split()[0])
held = jobs_held()
lat = []
stop = threading.Event()
def probe():
    s = socket.create_connection(("127.0.0.1", 11371))
    while not stop.is_set():
        t0 = time.perf_counter()
        s.sendall(b"put 0 0 60 5\r\nprobe\r\n")
        assert s.recv(100).startswith(b"INSERTED")
        lat.append((t0, time.perf_counter() - t0))
        time.sleep(0.002)
th = threading.Thread(target=probe); th.start()
time.sleep(1)
t_join = time.perf_counter()
n2 = node(2)
while "n2" not in isr():
    time.sleep(0.05)
t_in = time.perf_counter() - t_join
time.sleep(1)
stop.set(); th.join()
before = sorted(l for t, l in lat if t < t_join)
during = sorted(l for t, l in lat if t_join <= t < t_join + t_in)
p = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3 if xs else float("nan")
print(f"{src}: {held:,} jobs held; follower in the ISR after {t_in:.2f} s; probe puts before: p99 {p(before, .99):.2f} ms, "
      f"max {max(before)*1e3:.2f} ms; during the join ({len(during)} puts): p99 {p(during, .99):.2f} ms, max {max(during)*1e3:.2f} ms")
for p_ in (n1, n2, etcd):
    p_.terminate()
for p_ in (n1, n2, etcd):
    p_.wait()
