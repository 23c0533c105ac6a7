# Quick start: `make run` serves on 127.0.0.1:11300; `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed

.PHONY: install pyc run test lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[http,admin,cluster,test,lint]'
	touch $(STAMP)

# Byte-compile the sources: the server starts in about half the time when
# it need not compile them (PYTHONDONTWRITEBYTECODE, or a user who cannot
# write here, would make it compile them at every start). Files already
# compiled are skipped.
pyc: install
	@$(VENV)/bin/python -m compileall -q src

# The server prints nothing at start, as beanstalkd does; make says where it listens.
ADDR ?= 127.0.0.1
PORT ?= 11300
run: pyc
	@echo "$$($(VENV)/bin/pybeanstalkd -v): listening on $(ADDR):$(PORT) (Ctrl-C stops it)"
	$(VENV)/bin/pybeanstalkd -l $(ADDR) -p $(PORT)

test: pyc
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

# ruff over the code and the tests; mypy over src/ (strict for core/ and binlog/)
lint: install
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info
