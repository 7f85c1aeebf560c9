# `make demo` and `make test` work on a fresh machine with only Python 3.11+:
# they create .venv and install pardnn into it (editable) with what they need.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
EXTRAS ?= dev,tf,onnx
comma  := ,
STAMP  := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
PYTEST_ARGS ?=

.PHONY: all demo test test-all bench clean help

help:
	@echo "make demo      partition a shipped sample graph onto 4 devices and print the summary"
	@echo "make test      run the test suite (fast subset: everything not marked slow)"
	@echo "make test-all  run every test, slow ones included"
	@echo "make bench     run the benchmark scripts in benchmarks/"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	@# bytecode now: where PYTHONDONTWRITEBYTECODE is set, every command would compile pardnn's sources
	@# again (0.1-0.2 s each); a stale file is only recompiled in memory, as without one
	$(BIN)/python -m compileall -q pardnn frontends
	@touch $@

demo: $(STAMP)
	$(BIN)/pardnn info sample_graphs/pardnn_vgg16.json.gz
	@echo
	$(BIN)/pardnn partition sample_graphs/pardnn_vgg16.json.gz --devices 4 --memory 2GiB \
		-o out/vgg16.placement.json

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/simulator_scaling.py
	$(BIN)/python benchmarks/baseline_speed.py

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis *.egg-info
