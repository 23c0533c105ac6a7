# Quick start: `make run` serves on 127.0.0.1:11300; `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed

.PHONY: install pyc run test check lint clean install-service

install: $(STAMP)

# The package is installed editable, its mypyc modules (setup.py) compiled
# beside their sources, where Python imports them in their place: a change
# to what they are compiled from builds them again (a minute or two). With
# no C compiler or Python headers, or PYBEANSTALKD_PURE=1, it is installed
# as pure Python, which is then said.
# (the folders and files setup.py's COMPILED lists modules of)
COMPILED_FROM := $(wildcard src/pybeanstalkd/__init__.py src/pybeanstalkd/core/*.py) \
                 $(addprefix src/pybeanstalkd/binlog/,apply.py bodies.py codec.py file.py files.py format.py \
                   recovery.py sync.py) \
                 src/pybeanstalkd/server/transport.py \
                 src/pybeanstalkd/server/gate.py
$(STAMP): pyproject.toml setup.py $(COMPILED_FROM)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[http,admin,cluster,test,lint]'
	@PYBEANSTALKD_PURE= $(VENV)/bin/python -c "$$SAY_PURE"
	touch $(STAMP)
define SAY_PURE
import sys
from pybeanstalkd import build
if build() != "compiled with mypyc":
    print("make: pybeanstalkd is installed as pure Python, not compiled with mypyc"
          " (no C compiler or Python headers, or PYBEANSTALKD_PURE=1)", file=sys.stderr)
endef
export SAY_PURE

# Byte-compile the sources: the server starts in about half the time when
# it need not compile them (PYTHONDONTWRITEBYTECODE, or a user who cannot
# write here, would make it compile them at every start). Files already
# compiled are skipped.
pyc: install
	@$(VENV)/bin/python -m compileall -q src

# The server prints nothing at start, as beanstalkd does; make says where it
# listens once it answers there (else the server's own error and status).
# A port another process listens on is named first, with the way out.
ADDR ?= 127.0.0.1
PORT ?= 11300
run: pyc
	@$(VENV)/bin/python -c "$$LISTENERS" taken $(PORT) $(ADDR)
	@$(VENV)/bin/python -c "$$LISTENERS" wait $(PORT) $$$$ $(ADDR) & \
	exec $(VENV)/bin/pybeanstalkd -l $(ADDR) -p $(PORT)
# (`taken PORT ADDR`: fails, saying who, if a process listens on PORT at
# ADDR or at a wildcard address (so that the server's bind would fail).
# `wait PORT PID ADDR`: PID is the shell's until its exec, then the
# server's; says so once that process holds a socket listening on PORT, as
# the kernel's tables show (no connection is made: the server's counters
# stay at 0), and nothing if it exits first.)
define LISTENERS
import os, signal, socket, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: quietly
mode, port = sys.argv[1], int(sys.argv[2])
def listeners(addrs=None):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).readlines()[1:]:
            f = line.split()
            ip, p = f[1].rsplit(":", 1)
            if f[3] == "0A" and int(p, 16) == port and (addrs is None or ip in addrs):
                inodes.add(f"socket:[{f[9]}]")
    return inodes
def in_table(family, ip):
    # /proc/net/tcp* write an address as 32-bit words in host byte order
    b = socket.inet_pton(family, ip)
    return "".join(b[i:i + 4][::-1].hex().upper() for i in range(0, len(b), 4))
def holds(pid, inodes):
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            if os.readlink(f"{fds}/{fd}") in inodes:
                return True
        except FileNotFoundError:  # closed since the listing (a start-up opens many)
            pass
    return False
if mode == "taken":
    try:
        found = {(a[0], a[4][0]) for a in socket.getaddrinfo(sys.argv[3], port)}
    except OSError:
        sys.exit(0)  # the server says what is wrong with the address
    wild = {(socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")}
    inodes = listeners(None if found & wild else  # a wildcard bind fails on any
                       {in_table(f, ip) for f, ip in found | wild if f in (socket.AF_INET, socket.AF_INET6)})
    if not inodes:
        sys.exit(0)
    who = ""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if holds(pid, inodes):
                who = f" ({open(f'/proc/{pid}/comm').read().strip()}, pid {pid})"
                break
        except OSError:
            pass
    print(f"make: port {port} is taken{who}: make run PORT=NNNN serves on another",
          file=sys.stderr)
    sys.exit(1)
pid, addr = sys.argv[3], sys.argv[4]
while True:
    try:
        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
            sys.exit(1)
        if holds(pid, listeners()):
            break
    except OSError:
        sys.exit(1)
    time.sleep(0.02)
from pybeanstalkd.cli import version_line
print(f"{version_line()}: listening on {addr}:{port} (Ctrl-C stops it)", flush=True)
endef
export LISTENERS

# The tests run side by side in JOBS processes (pytest-xdist): most of their
# time is waiting (servers starting, TTRs and delays running out, a browser),
# so 3 on this 2-vCPU machine take about 4 minutes where one takes 11.
# Every test runs on the build installed (compiled with mypyc where it
# could be), then the core's and the compatibility tests on pure Python
# (PYBEANSTALKD_PURE=1: the same checkout, its .py files; the servers the
# tests start inherit it).
JOBS ?= 3
test: pyc
	$(VENV)/bin/python -m pytest -q -n $(JOBS) $(PYTEST_ARGS)
	PYBEANSTALKD_PURE=1 $(VENV)/bin/python -m pytest -q -n $(JOBS) tests/core tests/compat $(PYTEST_ARGS)

# The edit-test loop: the pure core and what is compared with the reference
# and the client libraries (about a minute).
check: pyc
	$(VENV)/bin/python -m pytest -q -n $(JOBS) tests/core tests/compat tests/test_layering.py $(PYTEST_ARGS)

# ruff over the code and the tests; mypy over src/ (strict for core/ and binlog/)
lint: install
	$(VENV)/bin/ruff check src tests setup.py
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info
	find src -name '*.so' -delete

# One server as a system service (as root; docs/SERVICE.md): the package,
# built from this checkout, in a virtualenv of the system's Python under
# PREFIX (a pyenv Python in root's home cannot be run by the service's
# user), byte-compiled; the units in UNIT_DIR, pointed at PREFIX; the
# service's user, made if missing. Running it again upgrades in place.
PREFIX ?= /opt/pybeanstalkd
SERVICE_PYTHON ?= /usr/bin/python3
SERVICE_USER ?= pybeanstalkd
UNIT_DIR ?= /etc/systemd/system
EXTRAS ?= http,admin
install-service:
	test -x $(PREFIX)/bin/python || $(SERVICE_PYTHON) -m venv $(PREFIX)
	$(PREFIX)/bin/pip install -q --upgrade pip
	$(PREFIX)/bin/pip install -q --upgrade '.[$(EXTRAS)]'
	chmod -R a+rX $(PREFIX)
	mkdir -p $(UNIT_DIR)
	for unit in pybeanstalkd.service pybeanstalkd.socket pybeanstalkd@.service; do \
	    sed -e 's|/opt/pybeanstalkd|$(PREFIX)|g' -e 's|^User=pybeanstalkd|User=$(SERVICE_USER)|' \
	        examples/$$unit >$(UNIT_DIR)/$$unit; \
	done
	id -u $(SERVICE_USER) >/dev/null 2>&1 || \
	    useradd --system --no-create-home --shell /usr/sbin/nologin $(SERVICE_USER)
	@echo "installed $$($(PREFIX)/bin/pybeanstalkd -v) in $(PREFIX); units in $(UNIT_DIR)"
	@echo "start it: systemctl daemon-reload && systemctl enable --now pybeanstalkd.socket"
