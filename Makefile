# Two commands matter: `make run` (local cluster) and `make test` (the whole suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The real RocketMQ C++ client core, for interop tests: its own venv so it shadows nothing of ours.
CPP_VENV := build/venv-cpp
CPP_STAMP := $(CPP_VENV)/.installed

.PHONY: run test install lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,spark]'
	touch $@

install: $(STAMP)

$(CPP_STAMP):
	test -x $(CPP_VENV)/bin/python || $(PYTHON) -m venv $(CPP_VENV)
	$(CPP_VENV)/bin/python -m pip install -q rocketmq-python-cvs==2.1.0.3
	touch $@

run: install
	$(BIN)/python bin/local-cluster

test: install $(CPP_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/python bench/bench_remoting.py

clean:
	rm -rf $(VENV) build data .pytest_cache
