# Quick start: `make run` serves on 127.0.0.1:11300; `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed

.PHONY: install run test lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[http,admin,cluster,test,lint]'
	touch $(STAMP)

# The server prints nothing at start, as beanstalkd does; make says where it listens.
ADDR ?= 127.0.0.1
PORT ?= 11300
run: install
	@echo "$$($(VENV)/bin/pybeanstalkd -v): listening on $(ADDR):$(PORT) (Ctrl-C stops it)"
	$(VENV)/bin/pybeanstalkd -l $(ADDR) -p $(PORT)

test: install
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

# ruff over the code and the tests; mypy over src/ (strict for core/ and binlog/)
lint: install
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info
