"""Which build runs: the modules setup.py lists compiled with mypyc, or
every module from its .py file (pure Python, as PYBEANSTALKD_PURE=1 asks).
`make test` runs these on both."""
import ast
import os
import pathlib
import subprocess
import sys
from importlib import import_module
from importlib.machinery import EXTENSION_SUFFIXES

import pybeanstalkd
from pybeanstalkd import build

ROOT = pathlib.Path(__file__).resolve().parents[2]


def compiled_modules() -> list[str]:
    """setup.py's COMPILED, as module names."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    paths = next(ast.literal_eval(n.value) for n in tree.body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "COMPILED")
    return ["pybeanstalkd." + p.removesuffix(".py").replace("/", ".") for p in paths]


def is_extension(name: str) -> bool:
    return (import_module(name).__file__ or "").endswith(tuple(EXTENSION_SUFFIXES))


def test_the_build_is_the_one_asked_for():
    """Without PYBEANSTALKD_PURE, the build installed: compiled where a C
    compiler was, else pure Python, a supported install that `make test`
    passes on. PYBEANSTALKD_EXPECT_COMPILED=1 (.ci/run) demands the
    compiled one, so that CI cannot pass on pure Python alone."""
    if pybeanstalkd.pure_requested():
        assert build() == "pure Python"
    elif os.environ.get("PYBEANSTALKD_EXPECT_COMPILED", "") not in ("", "0"):
        assert build() == "compiled with mypyc"
    else:
        assert build() in ("compiled with mypyc", "pure Python")


def test_every_listed_module_is_compiled_or_none_is():
    listed = compiled_modules()
    assert "pybeanstalkd.core.engine" in listed  # (what build() looks at)
    compiled = [m for m in listed if is_extension(m)]
    assert compiled == (listed if build() == "compiled with mypyc" else [])


def test_pure_loads_no_extension_of_the_package():
    """PYBEANSTALKD_PURE=1: every module of the package from its .py, though
    compiled ones sit beside them."""
    code = ("import sys, pybeanstalkd.cli, pybeanstalkd.core.engine, pybeanstalkd.binlog.format\n"
            "from importlib.machinery import EXTENSION_SUFFIXES as X\n"
            "print(sorted(n for n, m in list(sys.modules.items()) if n.startswith('pybeanstalkd')"
            " and (getattr(m, '__file__', None) or '').endswith(tuple(X))))")
    env = dict(os.environ, PYBEANSTALKD_PURE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    assert out.stdout == b"[]\n", out.stderr


def test_the_server_runs_the_build_the_tests_run():
    out = subprocess.run([sys.executable, "-m", "pybeanstalkd", "-v"], capture_output=True, check=True)
    assert out.stdout.decode().endswith(f", {build()})\n")
