# mla-verify.  `make setup verify` on a fresh machine; `make test` runs the test suite.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# CPU machines take the CPU build of torch from the local wheel; a GPU box keeps its own torch
# (make setup TORCH= on a machine whose torch is already installed system-wide).
TORCH  ?= torch==2.13.0
SUITES ?= smoke,decode,verify,fp8,edge
BACKEND ?= auto
STAMP  := $(shell date +%Y%m%d-%H%M%S)

.PHONY: setup verify test lint clean

setup: $(BIN)/mla-verify

$(BIN)/mla-verify: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(if $(TORCH),$(BIN)/pip install -q "$(TORCH)")
	$(BIN)/pip install -q -e ".[dev]"
	@touch $@

verify: setup
	$(BIN)/mla-verify run --suite $(SUITES) --backend $(BACKEND) --out reports/verify-$(STAMP).jsonl

test: setup
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check reference harness tests

clean:
	rm -rf $(VENV) reports/*.jsonl reports/*.html
