# mla-verify.  On a fresh machine `make verify` sets up .venv (`make setup`) and runs the main suites with a
# report; `make test` sets up too, then runs pytest and the mutant selfcheck.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# CPU machines take the CPU build of torch from the local wheel.  A GPU box (nvidia-smi lists a GPU)
# keeps the torch its kernels were built for: the venv sees the system's site-packages, and
# scripts/install_kernels.sh adds the FlashMLA package that matches that torch.
GPU    := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH  ?= $(if $(GPU),,torch==2.13.0)
# graph cases need CUDA: on a CPU machine they are recorded as unsupported, with the reason
SUITES ?= smoke,decode,verify,fp8,edge,graph,scale,sparse,sparse-v4
BACKEND ?= auto
# REQUIRE_KERNEL=1: exit 2 before running unless a real kernel (not the pure-PyTorch backend) is verified
REQUIRE_KERNEL ?=
# JUNIT=path.xml: also write a JUnit XML file (one testcase per case and backend) for the CI system
JUNIT ?=
STAMP  := $(shell date +%Y%m%d-%H%M%S)

.PHONY: setup verify test lint clean triton-cpu

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

# pytest over TEST_JOBS processes (pytest-xdist), a test file each at a time, so a module's fixture runs once
TEST_JOBS ?= 2
test: setup
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadfile
	$(BIN)/mla-verify selfcheck --no-progress

# SGLang's Triton MLA kernels on CPU (TRITON_INTERPRET=1, fp16) for tests/backends/test_triton_cpu.py.
# sglang pins torch 2.14.1, so it goes in --no-deps with the few wheels its kernel modules import
# (sglang.srt.utils and sglang.srt.environ pull in the rest).  triton 3.7.1: 3.6.0's interpreter
# breaks on numpy >= 2.4 (int() of a 1-element array).  About 250 MB of wheels.
TRITON_CPU_PKGS = triton==3.7.1 sglang==0.5.23 \
	orjson==3.13.0 psutil==7.2.2 pybase64==1.5.1 requests==2.34.2 urllib3==2.8.0 idna==3.20 \
	certifi==2026.10.19.post1 pillow==13.0.0 starlette==1.10.0 anyio==4.16.0 msgspec==0.23.0 \
	pydantic==2.14.4 pydantic-core==2.50.5 typing-inspection==0.4.5 annotated-types==0.7.0 pyzmq==27.3.0 ipython==9.18.1 \
	traitlets==5.16.1 aiohttp==3.14.5 multidict==7.2.1 attrs==26.1.0 yarl==1.25.1 propcache==0.5.4 \
	aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0

triton-cpu: setup
	$(BIN)/pip install -q --no-deps --only-binary=:all: $(TRITON_CPU_PKGS)

lint: setup
	$(BIN)/ruff check reference harness tests
	$(BIN)/python scripts/check_imports.py

clean:
	rm -rf $(VENV) reports/*.jsonl reports/*.html
