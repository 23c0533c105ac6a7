"""Exec to the first reply, for several servers started in turn, round
after round (so that the VM's drift hits each alike).

    python3 startup-ab.py NAME=CMD ... (N=21 rounds; VAR=VALUE words before
    CMD go into its environment)

    python3 startup-ab.py reference=/usr/bin/beanstalkd \\
        compiled=.venv/bin/pybeanstalkd pure="PYBEANSTALKD_PURE=1 .venv/bin/pybeanstalkd" \\
        floor=".venv/bin/python docs/performance/startup-floor.py"

Each start: Popen with `-l 127.0.0.1 -p PORT`, connect retried every
0.5 ms, `list-tube-used`, the time to its reply; then the server's CPU
time by then (user+sys, from /proc: 10 ms ticks), SIGTERM. Prints the
median and range of each; OUT=FILE writes every time as JSON."""
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

from firstreply import first_reply

TCK = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TCK


def once(cmd, env, port):
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd + ["-l", "127.0.0.1", "-p", str(port)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s = first_reply(port)
        t = time.perf_counter() - t0
        c = cpu(p.pid)
        s.close()
        return t, c
    finally:
        p.terminate()
        p.wait()


def config(arg):
    name, _, text = arg.partition("=")
    words = shlex.split(text)
    env = {k: v for k, v in os.environ.items() if k != "PYBEANSTALKD_PURE"}
    while words and "=" in words[0] and not words[0].startswith("/"):
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    return name, words, env


configs = [config(a) for a in sys.argv[1:]]
n = int(os.environ.get("N", "21"))
res = {name: [] for name, _, _ in configs}
port = 13000
for _ in range(n):
    for name, cmd, env in configs:
        port += 1
        res[name].append(once(cmd, env, port))
out = {}
for name, _, _ in configs:
    ts = [x[0] * 1000 for x in res[name]]
    cs = [x[1] * 1000 for x in res[name]]
    out[name] = ts
    print("%-16s median %6.1f ms, range %6.1f-%6.1f; CPU by then: median %3.0f ms"
          % (name, statistics.median(ts), min(ts), max(ts), statistics.median(cs)))
if os.environ.get("OUT"):
    with open(os.environ["OUT"], "w") as f:
        json.dump(out, f)
