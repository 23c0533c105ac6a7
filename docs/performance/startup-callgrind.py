"""Instructions (callgrind's Ir) from exec to the first reply, exact and
the same from run to run, whatever the VM's load.

    python3 startup-callgrind.py [VAR=VALUE ...] CMD ...   (e.g. .venv/bin/pybeanstalkd)

The server runs under callgrind with `-l 127.0.0.1 -p PORT`; once its
first reply is in, callgrind_control asks for a dump, and a second command
wakes the server to take it (callgrind dumps when the program next runs).
CGDIR=DIR keeps the dump (callgrind_annotate --inclusive=yes DIR/cg.out.1)."""
import glob
import os
import subprocess
import sys
import tempfile
import time

from firstreply import first_reply

args = sys.argv[1:]
env = dict(os.environ)
while args and "=" in args[0] and not args[0].startswith("/"):
    k, _, v = args.pop(0).partition("=")
    env[k] = v
port = 12500 + os.getpid() % 300
d = os.environ.get("CGDIR") or tempfile.mkdtemp()
out = f"{d}/cg.out"
p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *args,
                      "-l", "127.0.0.1", "-p", str(port)], env=env,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
s = first_reply(port, pause=0.01, give_up=600)
time.sleep(0.5)
ctl = subprocess.Popen(["callgrind_control", "-d", str(p.pid)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1.0)
s.sendall(b"list-tube-used\r\n")
s.recv(100)
ctl.wait()
p.terminate()
p.wait()
for f in sorted(glob.glob(out + ".*")):
    for line in open(f):
        if line.startswith(("summary:", "totals:")):
            print("%.1f M instructions to the first reply" % (int(line.split()[1]) / 1e6))
            break
    break
