"""The package layout's rules, read from the imports (ast), lazy ones included.

- core/ is pure: it imports nothing that does I/O, reads the clock or starts
  threads, calls no open/print/input, and imports no other package of ours.
- binlog/ never imports server/ (nor ops/, cluster/, bench/, cli).
- bench/ talks to servers over sockets only: it imports nothing of ours
  outside bench/, except bench/micro.py (--micro), which times core/'s own
  code in-process and so imports core/, and only core/.
- nothing but cli.py and server/ imports server/; nothing imports bench/ from outside.
- client.py (the typed client) imports nothing of ours.
- ops/admin*.py (pybeanstalkd-admin) speaks the protocol only: it imports
  nothing of ours outside ops/admin*.
- the rest of ops/ (the HTTP side) imports core/ and binlog/ of ours: the
  server hands it its objects; it never imports server/, cluster/ or cli.
- cluster/ (replication) is imported only by cli.py, server/ and
  cluster/, so that without --cluster none of it loads. Its frame and state
  modules (cluster/frame.py) are pure, as core/ is. Only cluster/ imports
  the etcd client (aetcd, grpc).
- aiohttp and prometheus_client are imported only in ops/ (which the server
  imports only with --http), so that start-up without --http stays fast.
- settings flow one way: settings.py (the flags' values) imports nothing of
  ours; tls.py and reload.py (what cluster/ and server/ both use) import
  only each other and settings; cluster/ never imports server/, and
  nothing but __main__.py (python -m pybeanstalkd) imports cli.py.
- within a package the modules stand in layers: no import circle, however
  it runs (module -> module -> ... -> back), type-only imports (under
  TYPE_CHECKING) and lazy ones (in a function) included. A lower module
  that needs something of an upper one declares what (a Protocol, or a
  base class the upper one derives from), or the piece both need moves
  down.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / "src" / "pybeanstalkd"

# I/O, clocks, threads, processes, and ways around an import check.
IMPURE = {
    "asyncio", "socket", "selectors", "select", "ssl", "time", "threading", "os",
    "io", "subprocess", "signal", "resource", "fcntl", "multiprocessing",
    "concurrent", "shutil", "tempfile", "pathlib", "datetime", "random", "secrets",
    "sys", "mmap", "uvloop", "importlib", "builtins", "logging", "ctypes",
}
HTTP_ONLY = {"aiohttp", "prometheus_client", "yarl", "multidict"}
CLUSTER_ONLY = {"aetcd", "grpc"}
IMPURE_CALLS = {"open", "print", "input", "__import__", "exec", "eval"}
PURE_CLUSTER = {"pybeanstalkd.cluster.frame"}
PACKAGE_CONSTANTS = {"pybeanstalkd", "pybeanstalkd.BEANSTALKD_VERSION", "pybeanstalkd.__version__"}


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(modname: str, source: str, is_package: bool = False) -> list[tuple[int, str]]:
    """Every module a source imports, absolute, with its line; relative imports resolved."""
    out = []
    package = modname if is_package else modname.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            # `from . import x` may import a submodule x: count both.
            out.append((node.lineno, target))
            out += [(node.lineno, f"{target}.{a.name}") for a in node.names]
    return out


def calls(source: str) -> list[tuple[int, str]]:
    return [(n.lineno, n.func.id) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


def ours(name: str) -> bool:
    return name == "pybeanstalkd" or name.startswith("pybeanstalkd.")


def room(name: str) -> str:
    """The subpackage (or top-level module) a module of ours lives in."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def is_admin(name: str) -> bool:
    return name.startswith("pybeanstalkd.ops.admin")


def violations(modname: str, source: str, is_package: bool = False) -> list[str]:
    here = room(modname)
    bad = []
    for line, name in imports(modname, source, is_package):
        where = f"{modname}:{line} imports {name}"
        top = name.split(".")[0]
        if here == "core":
            if top in IMPURE:
                bad.append(f"{where}: core/ does no I/O and reads no clock")
            if ours(name) and room(name) != "core" and name not in PACKAGE_CONSTANTS:
                bad.append(f"{where}: core/ imports only core/ (and the package's constants)")
        if modname in PURE_CLUSTER and top in IMPURE:
            bad.append(f"{where}: {modname} is pure: no I/O, no clock")
        if here not in ("server", "cli", "cluster") and ours(name) and room(name) == "cluster":
            bad.append(f"{where}: only cli.py, server/ and cluster/ import cluster/")
        if here == "binlog" and ours(name) and room(name) in ("server", "ops", "cluster", "bench", "cli"):
            bad.append(f"{where}: binlog/ never imports {room(name)}/")
        if (here == "bench" and ours(name) and room(name) != "bench" and name != "pybeanstalkd"
                and not (modname == "pybeanstalkd.bench.micro" and room(name) == "core")):
            bad.append(f"{where}: bench/ imports nothing of the server's packages")
        if modname == "pybeanstalkd.client" and ours(name):
            bad.append(f"{where}: the client imports nothing of ours")
        if is_admin(modname) and ours(name) and not is_admin(name):
            bad.append(f"{where}: ops/admin*.py imports nothing of ours outside ops/admin*")
        if here != "bench" and ours(name) and room(name) == "bench":
            bad.append(f"{where}: only bench/ imports bench/")
        if here not in ("server", "cli", "cluster") and ours(name) and room(name) == "server":
            bad.append(f"{where}: only cli.py, server/ and cluster/ import server/")
        if here == "ops" and ours(name) and room(name) in ("cluster", "cli"):
            bad.append(f"{where}: ops/ imports only core/ and binlog/ of ours")
        if here == "cluster" and ours(name) and room(name) == "server":
            bad.append(f"{where}: cluster/ never imports server/ (settings and tls.py are shared)")
        if here not in ("cli", "__main__") and ours(name) and room(name) == "cli":
            bad.append(f"{where}: nothing imports cli.py (settings.py has the values)")
        if here == "settings" and ours(name) and name not in PACKAGE_CONSTANTS:
            bad.append(f"{where}: settings.py imports nothing of ours")
        if (here in ("tls", "reload") and ours(name)
                and room(name) not in ("tls", "reload", "settings")):
            bad.append(f"{where}: {here}.py imports only tls.py, reload.py and settings.py of ours")
        if here != "cluster" and top in CLUSTER_ONLY:
            bad.append(f"{where}: only cluster/ imports {top} (loaded only with --cluster)")
        if here != "ops" and top in HTTP_ONLY:
            bad.append(f"{where}: only ops/ imports {top} (start-up stays fast without --http)")
    if here == "core" or modname in PURE_CLUSTER:
        bad += [f"{modname}:{line} calls {fn}(): {here}/ does no I/O"
                for line, fn in calls(source) if fn in IMPURE_CALLS]
    return bad


def sources():
    for path in sorted(PKG.rglob("*.py")):
        yield module_name(path), path.read_text(), path.name == "__init__.py"


def package(modname: str) -> str:
    """The package a module sits in (a package's __init__: the one above)."""
    return modname.rpartition(".")[0]


def arrows(tree) -> dict[str, dict[str, int]]:
    """module -> {module of the same package it imports: the first line}, for
    tree's (name, source, is_package). An imported name that is not a module
    is its module's (`from .files import Wal`: files); a module's own
    packages, which Python imports before it anyway, are left out."""
    tree = list(tree)
    modules = {m for m, _, _ in tree}
    out: dict[str, dict[str, int]] = {}
    for m, src, is_package in tree:
        to = out.setdefault(m, {})
        for line, name in imports(m, src, is_package):
            if name not in modules:
                name = name.rpartition(".")[0]
            if (name in modules and name != m and not m.startswith(name + ".")
                    and package(name) == package(m)):
                to.setdefault(name, line)
    return out


def circles(tree) -> list[str]:
    """Each import circle within a package, said with its arrows and their
    lines: the modules that reach one another through their imports."""
    graph = arrows(tree)
    reach: dict[str, set[str]] = {}
    for m in graph:
        seen: set[str] = set()
        todo = list(graph[m])
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += graph.get(n, ())
        reach[m] = seen
    found, done = [], set()
    for m in sorted(graph):
        if m in reach[m] and m not in done:
            ring = sorted(n for n in reach[m] if m in reach[n])
            done.update(ring)
            ties = [f"{a}:{graph[a][b]} -> {b}" for a in ring for b in sorted(graph[a]) if b in ring]
            found.append(f"import circle of {len(ring)} modules: " + "; ".join(ties))
    return found


def test_no_package_has_an_import_circle():
    found = circles(sources())
    assert not found, "\n".join(found)


def test_every_room_exists_and_has_a_docstring():
    for pkg in ("core", "binlog", "server", "bench", "cluster"):
        assert (PKG / pkg / "__init__.py").exists()
    for m, src, _ in sources():
        assert ast.get_docstring(ast.parse(src)), f"{m} has no docstring saying what it is for"


# The checker itself must catch each kind of break.
@pytest.mark.parametrize("mod, src", [
    ("pybeanstalkd.core.queue", "import time\n"),
    ("pybeanstalkd.core.queue", "from time import monotonic\n"),
    ("pybeanstalkd.core.queue", "def f():\n    import socket\n"),
    ("pybeanstalkd.core.engine", "import os\n"),
    ("pybeanstalkd.core.engine", "import threading\n"),
    ("pybeanstalkd.core.engine", "import asyncio.events\n"),
    ("pybeanstalkd.core.engine", "from ..server import transport\n"),
    ("pybeanstalkd.core.engine", "from ..binlog.files import Wal\n"),
    ("pybeanstalkd.core.engine", "from .. import diag\n"),
    ("pybeanstalkd.core.stats", "def f():\n    return open('x').read()\n"),
    ("pybeanstalkd.core.stats", "print('x')\n"),
    ("pybeanstalkd.binlog.files", "from ..server.loop import serve\n"),
    ("pybeanstalkd.binlog.sync", "from pybeanstalkd.server import transport\n"),
    ("pybeanstalkd.bench.modes", "from ..core.queue import Queue\n"),
    ("pybeanstalkd.bench.modes", "import pybeanstalkd.binlog.format\n"),
    ("pybeanstalkd.bench.micro", "from ..server.transport import Server\n"),
    ("pybeanstalkd.bench.micro", "from ..binlog.files import Wal\n"),
    ("pybeanstalkd.core.queue", "from ..bench import spawn\n"),
    ("pybeanstalkd.ops.admin", "from ..core.stats import stats_yaml\n"),
    ("pybeanstalkd.ops.admin", "from .. import __version__\n"),
    ("pybeanstalkd.ops.admin_views", "from . import http\n"),
    ("pybeanstalkd.ops.admin_client", "def f():\n    import pybeanstalkd.bench.client\n"),
    ("pybeanstalkd.core.admin", "from ..ops import api\n"),
    ("pybeanstalkd.ops.http", "from ..server.transport import Server\n"),
    ("pybeanstalkd.ops.metrics", "from pybeanstalkd import cli\n"),
    ("pybeanstalkd.server.loop", "import aiohttp\n"),
    ("pybeanstalkd.binlog.sync", "from prometheus_client import Counter\n"),
    ("pybeanstalkd.cluster.frame", "import socket\n"),
    ("pybeanstalkd.cluster.frame", "def f():\n    print(1)\n"),
    ("pybeanstalkd.server.loop", "import aetcd\n"),
    ("pybeanstalkd.core.queue", "from ..cluster import frame\n"),
    ("pybeanstalkd.binlog.files", "from ..cluster.frame import Reader\n"),
    ("pybeanstalkd.cluster.link", "from ..server.tls import failure_reason\n"),
    ("pybeanstalkd.cluster.node", "def f():\n    from ..server import transport\n"),
    ("pybeanstalkd.server.loop", "from ..cli import main\n"),
    ("pybeanstalkd.server.gate", "from pybeanstalkd import cli\n"),
    ("pybeanstalkd.settings", "from .server.runtime import Runtime\n"),
    ("pybeanstalkd.tls", "from .server.auth import TokenFile\n"),
])
def test_the_checker_catches(mod, src):
    assert violations(mod, src)


@pytest.mark.parametrize("mod, src", [
    ("pybeanstalkd.core.queue", "from heapq import heappush\nfrom .job import Job\n"),
    ("pybeanstalkd.core.engine", "from .. import BEANSTALKD_VERSION\nfrom . import protocol as P\n"),
    ("pybeanstalkd.binlog.recovery", "import os, time\nfrom ..core.job import Job\n"),
    ("pybeanstalkd.server.loop", "from ..binlog.sync import Syncer\nimport asyncio\n"),
    ("pybeanstalkd.bench.main", "import socket\nfrom .spawn import Spawned\n"),
    ("pybeanstalkd.bench.micro", "from ..core.engine import Engine\n"),
    ("pybeanstalkd.ops.admin", "import socket\nfrom .admin_client import Conn\n"
                               "def f():\n    import pybeanstalkd.ops.admin_views as v\n"),
    ("pybeanstalkd.ops.http", "from aiohttp import web\nfrom ..core import admin\nfrom ..binlog import files\n"),
    ("pybeanstalkd.server.loop", "def f():\n    from ..ops.http import start\n"),
    ("pybeanstalkd.cluster.frame", "import struct, zlib\n"),
    ("pybeanstalkd.cluster.coord", "import json\nimport aetcd\n"),
    ("pybeanstalkd.server.loop", "def f():\n    from ..cluster import frame\n"),
    ("pybeanstalkd.cluster.link", "from ..tls import failure_reason\n"),
    ("pybeanstalkd.server.gate", "from ..settings import Settings\n"),
    ("pybeanstalkd.tls", "from .reload import Reloading\nfrom .settings import Settings\n"),
])
def test_the_checker_lets_allowed_imports_pass(mod, src):
    assert violations(mod, src) == []


# ... and each import circle, however it is tied.
T = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
B = "pybeanstalkd.binlog."


@pytest.mark.parametrize("tree", [
    [(B + "a", "from .b import X\n"), (B + "b", "from .a import Y\n")],
    [(B + "a", "from .b import X\n"), (B + "b", T + "    from .a import Y\n")],
    [(B + "a", "from . import b\n"), (B + "b", "def f():\n    from . import a\n")],
    [(B + "a", "from . import b as B, c\n"), (B + "b", ""), (B + "c", "from .d import Z\n"),
     (B + "d", T + "    from pybeanstalkd.binlog.a import W\n")],
    [("pybeanstalkd.server.gate", T + "    from .transport import Server\n"),
     ("pybeanstalkd.server.transport", "from .gate import Immediate\n")],
])
def test_the_circle_check_catches(tree):
    assert len(circles((m, src, False) for m, src in tree)) == 1


@pytest.mark.parametrize("tree", [
    # layers: a over b over c, each import going down
    [(B + "a", "from .b import X\nfrom . import c\n"), (B + "b", T + "    from .c import Y\n"),
     (B + "c", "import os\n")],
    # a package's __init__ that imports its modules, which import from the package
    [("pybeanstalkd.binlog", "from . import a\n", True), (B + "a", "from . import b\n", False),
     (B + "b", "from .. import binlog\nfrom . import __doc__\n", False)],
])
def test_the_circle_check_lets_layers_pass(tree):
    assert circles(t if len(t) == 3 else (*t, False) for t in tree) == []
