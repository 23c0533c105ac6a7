"""The compiled build: the modules below compiled with mypyc into C
extensions, which Python imports in place of their .py files. Everything
else (the metadata) is in pyproject.toml.

Without a C compiler or Python's headers, or with PYBEANSTALKD_PURE=1 in
the environment, the package is built as pure Python, and that is said once
on stderr. The same sources run either way; PYBEANSTALKD_PURE=1 at run time
makes an installed compiled build load its .py files instead
(src/pybeanstalkd/__init__.py).
"""
from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES

from setuptools import setup
from setuptools.command.build_py import build_py

# The modules compiled, relative to src/pybeanstalkd/: the core, the
# binlog's record format, and the transport's per-event path. A module here
# must pass mypy's checks as mypyc reads them (pyproject.toml's [tool.mypy])
# and may not be patched at run time by the tests.
COMPILED = [
    "core/admin.py",
    "core/cmdtable.py",
    "core/commands.py",
    "core/cooling.py",
    "core/engine.py",
    "core/extensions.py",
    "core/heaps.py",
    "core/held.py",
    "core/hiding.py",
    "core/hist.py",
    "core/holding.py",
    "core/idmap.py",
    "core/job.py",
    "core/keys.py",
    "core/jobids.py",
    "core/loading.py",
    "core/members.py",
    "core/jobmap.py",
    "core/jobmoves.py",
    "core/outcome.py",
    "core/protocol.py",
    "core/putlines.py",
    "core/puttags.py",
    "core/queue.py",
    "core/replica.py",
    "core/replies.py",
    "core/reservedids.py",
    "core/reserving.py",
    "core/run.py",
    "core/session.py",
    "core/slices.py",
    "core/stats.py",
    "core/tagged.py",
    "core/store.py",
    "core/tags.py",
    "core/tick.py",
    "core/timers.py",
    "core/tubes.py",
    "core/weighted.py",
    "binlog/apply.py",
    "binlog/bodies.py",
    "binlog/codec.py",
    "binlog/file.py",
    "binlog/files.py",
    "binlog/format.py",
    "binlog/recovery.py",
    "binlog/sync.py",
    "server/gate.py",
    "server/transport.py",
]

HERE = os.path.dirname(os.path.abspath(__file__))


def why_pure() -> str | None:
    """Why the build is pure Python, or None if it can be compiled."""
    if os.environ.get("PYBEANSTALKD_PURE", "") not in ("", "0"):
        return "PYBEANSTALKD_PURE is set"
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        return "Python's headers (Python.h) are missing"
    # The compiler setuptools would call (CC, else the one Python was built with)
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    if not cc or shutil.which(cc[0]) is None:
        return f"no C compiler ({cc[0] if cc else 'cc'})"
    return None


def remove_stale_extensions(compiled: list[str]) -> None:
    """An editable install builds the extensions beside the sources, where
    Python imports them in place of the .py files: remove those of modules
    this build does not compile (all of them in a pure build), so that none
    stands in for a newer or no longer compiled source."""
    src = os.path.join(HERE, "src")
    pkg = os.path.join(src, "pybeanstalkd")
    keep = {m.removesuffix(".py") for m in compiled}
    suffixes = sorted(EXTENSION_SUFFIXES, key=len, reverse=True)
    for top, _dirs, files in [*os.walk(pkg), (src, [], os.listdir(src))]:
        for f in files:
            suffix = next((x for x in suffixes if f.endswith(x)), None)
            if suffix is None:
                continue
            path = os.path.join(top, f)
            module = os.path.relpath(path, pkg).removesuffix(suffix)
            if top == src:
                stale = f.startswith("pybeanstalkd__mypyc") and not compiled
            else:
                stale = module not in keep
            if stale:
                os.remove(path)


class PureBuildPy(build_py):
    """build_py, saying why the build is pure Python: once, as the backend
    runs this file for each of its steps (requirements, metadata, build)."""

    reason = ""

    def run(self) -> None:
        print(f"pybeanstalkd: {self.reason}: building pure Python, not compiled with mypyc",
              file=sys.stderr)
        super().run()


def ext_modules() -> list[object]:
    reason = why_pure()
    if reason is not None:
        PureBuildPy.reason = reason
        remove_stale_extensions([])
        return []
    from mypyc.build import mypycify

    remove_stale_extensions(COMPILED)
    paths = [os.path.join("src", "pybeanstalkd", m) for m in COMPILED]
    os.chdir(HERE)  # mypy reads pyproject.toml's [tool.mypy] from here
    # (Its overrides for the modules of other packages are not all used when
    # mypy follows only the compiled modules' imports: not an error here.)
    # One group, named: the shared library is pybeanstalkd__mypyc, not a hash.
    return list(mypycify(["--no-warn-unused-configs", *paths], group_name="pybeanstalkd"))


modules = ext_modules()
setup(ext_modules=modules, cmdclass={} if modules else {"build_py": PureBuildPy})
