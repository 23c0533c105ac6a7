"""The least an `idp:` put can add to a plain put, in this interpreter.

    PYTHON=.venv/bin/python python3 docs/performance/idp-floor.py

A unique put must do a few things a plain put does not: split the key
off its line, look the rest up, check the key as a name, look for it in
its tube's key map and add it there, and make and keep the job's tags.
Each step below is the one before it plus one more, run alone in a loop
(no server, no queue), under callgrind: instructions a put, the slope
between 2,000 and 6,000 puts, as docs/performance/tag-cost.sh counts a
whole server's. Young objects are frozen after each young collection, as
the server does (server/loop.py). The last two rows keep a plain tuple,
then the key alone, in place of the Tags NamedTuple: what that type
costs, and the least that any record of a job's key by its id (for its
delete, its stats-job and the binlog) can cost.

Compare the total with the server's plain put (tag-cost.sh's first row):
the goal of an `idp:` put under 1.10x a plain one leaves 10% of it.
"""
import os
import subprocess
import sys
import tempfile

STEPS = {
    # what the plain put does too: its line, looked up whole
    "base": "hdr = PUTS.get(line)",
    "split": "head, idp, key = line.rpartition(b' idp:')",
    "head": "hdr = PUTS.get(head)",
    "check": "ok = len(key) <= 200 and key.translate(NAME_TABLE).isalpha() and key[0] != 45",
    "key": "if key not in keys:\n        keys[key] = nid",
    "tags": "jobs[nid] = new_tags(Tags, (key, 0, None, 1, None, None, 0))",
}
ORDER = ["base", "split", "head", "check", "key", "tags"]

PROGRAM = """
import gc, sys
gc.callbacks.append(lambda phase, info: phase == "stop" and info["generation"] == 0 and gc.freeze())
from pybeanstalkd.core.protocol import NAME_TABLE
from pybeanstalkd.core.tags import Tags, new_tags
PUTS = {b"put 0 0 60 100": (0, 0, 60, 100)}
keys, jobs = {}, {}
def step(line, nid):
    %s
lines = [b"put 0 0 60 100 idp:key-%%d" %% i for i in range(int(sys.argv[1]))]
for i, line in enumerate(lines):
    step(line, i)
"""


def instructions(body: str, n: int) -> int:
    python = os.environ.get("PYTHON", sys.executable)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PROGRAM % body)
    try:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, f.name, str(n)],
            env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": src},
            capture_output=True, text=True, check=True).stderr
    finally:
        os.unlink(f.name)
    return int(next(line for line in out.splitlines() if "Collected" in line).split()[3])


def per_put(body: str) -> float:
    return (instructions(body, 6000) - instructions(body, 2000)) / 4000


def main() -> None:
    base = per_put(STEPS["base"])
    print(f"{'base':6s} {base:8.0f}  (the plain put's line lookup and the loop)")
    done = [STEPS["base"]]
    last = base
    for name in ORDER[1:]:
        done.append(STEPS[name])
        total = per_put("\n    ".join(done))
        print(f"{name:6s} {total:8.0f}  +{total - last:5.0f}  (above base: {total - base:5.0f})")
        last = total
    tuple_row = per_put("\n    ".join(done[:-1] + ["jobs[nid] = (key, 0, None, 1, None, None, 0)"]))
    print(f"tuple  {tuple_row:8.0f}  (tags as a plain tuple; above base: {tuple_row - base:5.0f})")
    bare = per_put("\n    ".join(done[:-1] + ["jobs[nid] = key"]))
    print(f"bare   {bare:8.0f}  (the key alone kept by id; above base: {bare - base:5.0f})")


if __name__ == "__main__":
    main()
