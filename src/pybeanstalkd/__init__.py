"""pybeanstalkd: a beanstalkd-compatible work-queue server.

The package may be built with some of its modules compiled by mypyc
(setup.py): each is then a C extension beside its .py file, which Python
imports in its place. PYBEANSTALKD_PURE=1 in the environment makes every
module of the package load from its .py file instead: the same checkout
then runs as pure Python (the tests run on both), and so do the processes
it starts, which inherit the environment.
"""

__version__ = "0.1.0"
# The protocol version we are byte-compatible with; clients gate features on it.
BEANSTALKD_VERSION = "1.13"


def _load_sources_only() -> None:
    """Find the package's modules in their .py files only (their bytecode
    caches still used), ahead of the path finder, which would take a
    compiled extension beside one."""
    import sys
    from collections.abc import Sequence
    from importlib.machinery import SOURCE_SUFFIXES, FileFinder, ModuleSpec, SourceFileLoader
    from types import ModuleType

    class SourceOnlyFinder:
        def __init__(self) -> None:
            self.finders: dict[str, FileFinder] = {}  # by directory

        def find_spec(self, fullname: str, path: Sequence[str] | None,
                      target: ModuleType | None = None) -> ModuleSpec | None:
            if path is None or not fullname.startswith(__name__ + "."):
                return None  # (not a module of the package)
            for entry in path:
                finder = self.finders.get(entry)
                if finder is None:
                    finder = self.finders[entry] = FileFinder(entry, (SourceFileLoader, SOURCE_SUFFIXES))
                spec = finder.find_spec(fullname, target)
                if spec is not None:
                    return spec
            return None

    sys.meta_path.insert(0, SourceOnlyFinder())


def pure_requested() -> bool:
    """Whether PYBEANSTALKD_PURE asks for the pure Python build."""
    import os

    return os.environ.get("PYBEANSTALKD_PURE", "") not in ("", "0")


def build() -> str:
    """Which build runs: "compiled with mypyc" if the core was loaded from
    C extensions, else "pure Python"."""
    from importlib.machinery import EXTENSION_SUFFIXES

    from .core import engine  # (compiled in the compiled build)

    compiled = (engine.__file__ or "").endswith(tuple(EXTENSION_SUFFIXES))
    return "compiled with mypyc" if compiled else "pure Python"


if pure_requested():
    _load_sources_only()
