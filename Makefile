# mla-verify.  `make setup verify` on a fresh machine; `make test` runs the test suite.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# CPU machines take the CPU build of torch from the local wheel.  A GPU box (nvidia-smi lists a GPU)
# keeps the torch its kernels were built for: the venv sees the system's site-packages, and
# scripts/install_kernels.sh adds the FlashMLA package that matches that torch.
GPU    := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH  ?= $(if $(GPU),,torch==2.13.0)
# graph cases need CUDA: on a CPU machine they are recorded as unsupported, with the reason
SUITES ?= smoke,decode,verify,fp8,edge,graph,scale
BACKEND ?= auto
# REQUIRE_KERNEL=1: exit 2 before running unless a real kernel (not the pure-PyTorch backend) is verified
REQUIRE_KERNEL ?=
# JUNIT=path.xml: also write a JUnit XML file (one testcase per case and backend) for the CI system
JUNIT ?=
STAMP  := $(shell date +%Y%m%d-%H%M%S)

.PHONY: setup verify test lint clean

setup: $(BIN)/mla-verify

$(BIN)/mla-verify: pyproject.toml
	$(PYTHON) -m venv $(if $(TORCH),,--system-site-packages) $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(if $(TORCH),$(BIN)/pip install -q "$(TORCH)")
	$(BIN)/pip install -q -e ".[dev]"
	$(if $(GPU),bash scripts/install_kernels.sh $(BIN)/python)
	@touch $@

# The report is written even when the run fails; make still fails with the run's exit code
# (or the report's, when the run passed and only the report could not be written).
# SETUP= MLA="python3 -m harness.cli" runs from a checkout with no venv (an offline GPU box).
SETUP ?= setup
MLA   ?= $(BIN)/mla-verify

verify: $(SETUP)
	@rc=0; $(MLA) run --suite $(SUITES) --backend $(BACKEND) $(if $(REQUIRE_KERNEL),--require-kernel) $(if $(JUNIT),--junit-xml $(JUNIT)) --out reports/verify-$(STAMP).jsonl || rc=$$?; \
	if [ -f reports/verify-$(STAMP).jsonl ]; then \
	  $(MLA) report reports/verify-$(STAMP).jsonl -o reports/verify-$(STAMP).html || { rrc=$$?; [ $$rc -ne 0 ] || rc=$$rrc; }; \
	else echo "no results file, so no report: reports/verify-$(STAMP).jsonl" >&2; fi; \
	exit $$rc

test: setup
	$(BIN)/python -m pytest -q
	$(BIN)/mla-verify selfcheck --no-progress

lint: setup
	$(BIN)/ruff check reference harness tests
	$(BIN)/python scripts/check_imports.py

clean:
	rm -rf $(VENV) reports/*.jsonl reports/*.html
