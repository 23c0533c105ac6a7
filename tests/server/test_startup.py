"""Start-up: what a serving server has loaded. A flag's modules are
imported where the flag is acted on (cli.py, server/loop.py), so that a
server started without it does not spend its start-up loading them, and
start-up runs with the collector off, which is on again once it serves."""
from __future__ import annotations

from support import serving_server_state

# What only a flag needs, by the name of a package, of a module of ours or
# a package of ours, or of a module of the standard library. (ssl is not
# among them: asyncio and uvloop import it themselves.)
FLAG_ONLY_PACKAGES = {
    "aiohttp", "yarl", "multidict", "prometheus_client",  # --http
    "aetcd", "grpc",  # --cluster
    "rich",  # pybeanstalkd-admin's views
}
FLAG_ONLY_OURS = {
    "pybeanstalkd.binlog",  # -b
    "pybeanstalkd.tls",  # --tls-cert
    "pybeanstalkd.server.auth",  # --auth-tokens
    "pybeanstalkd.reload",  # (the TLS and token files, reloaded)
    "pybeanstalkd.ops",  # --http
    "pybeanstalkd.cluster",  # --cluster
    "pybeanstalkd.bench", "pybeanstalkd.client",  # other programs
}
FLAG_ONLY_STDLIB = {
    "random",  # --extensions: the draws of weighted reserves
}


def flag_only(modules: set[str]) -> set[str]:
    return {m for m in modules
            if m.split(".")[0] in FLAG_ONLY_PACKAGES or m in FLAG_ONLY_STDLIB
            or any(m == p or m.startswith(p + ".") for p in FLAG_ONLY_OURS)}


def test_a_plain_server_loads_nothing_that_only_a_flag_needs(tmp_path):
    modules, collecting, frozen = serving_server_state(tmp_path)
    assert "pybeanstalkd.server.transport" in modules  # it was serving
    assert flag_only(modules) == set()
    # The collector is on while it serves, start-up's objects frozen.
    assert collecting and frozen > 10_000


def test_the_flags_load_what_they_need(tmp_path):
    wal = tmp_path / "wal"
    wal.mkdir()
    modules, collecting, _ = serving_server_state(tmp_path, "-b", str(wal), "--extensions")
    assert {"pybeanstalkd.binlog.files", "pybeanstalkd.binlog.sync", "random"} <= modules
    assert flag_only(modules) == {m for m in modules
                                  if m.startswith("pybeanstalkd.binlog") or m == "random"}
    assert collecting
