# The two commands of the README:
#   make book SIZE=cpu   execute every chapter's notebook at SIZE and write static HTML to _build/html
#   make test            ruff's import rules, the unit tests but the slow ones, the book build at smoke size (it executes
#                        every notebook), and the tests that consult the machine again on a faked unknown one (RLM_FAKE_MACHINE=1)
# Both first create .venv from the pinned requirements (torch==2.13.0 is the CPU build; see requirements.txt).
SIZE ?= cpu
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST := $(BIN)/python -m pytest
# Prints how long a test phase took; the phase's exit code is kept (pytest's 5, "no tests ran", fails too).
PHASE = ./.ci/phase

.PHONY: book test lint test-lint test-unit test-fake-machine test-slow test-extended test-nbval test-book notebooks venv clean gpu-archive gpu-wheels reference cluster-rehearsal

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-test.txt constraints.txt pyproject.toml
	@echo "== installing $(VENV) from the pinned requirements (first time: a few minutes)"
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BIN)/python -m pip install -q -r requirements.txt -r requirements-test.txt -c constraints.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	$(BIN)/python -m pip check
	touch $@

book: venv
	$(BIN)/python -m rlm_lab.cli book build --size $(SIZE)

# The phases run even when one fails; the command fails if any did. (CI, .ci/run, adds test-slow.)
test: venv
	@rm -f _build/phases.txt; rc=0; \
	for phase in lint unit book fake-machine; do \
		$(PHASE) $$phase $(MAKE) --no-print-directory test-$$phase || rc=1; \
	done; \
	cat _build/phases.txt; exit $$rc

# ruff's import rules over the package (pyproject.toml [tool.ruff]): imports at the top, the heavy set lazy.
lint: venv
	$(BIN)/ruff check rlm_lab
test-lint: lint

# Everything under tests/ except what executes notebooks or builds the book, and the tests marked slow.
test-unit: venv
	$(PYTEST) -q --durations=10 -m "not notebook and not slow" tests

# The tests that consult this machine (its CPU model, host, profile, machine key), again with the machine faked to
# one no committed profile or record names ($$RLM_FAKE_MACHINE, rlm_lab.device): nothing the suite checks may
# depend on which CPU runs it (issue 35).
FAKE_MACHINE_TESTS := tests/test_reader_machine.py tests/chapters/test_ch09_results.py tests/chapters/test_ch04_compare.py \
	tests/chapters/test_your_machine.py tests/cost/test_hardware.py tests/calibrate tests/records tests/test_host.py \
	tests/test_device.py tests/test_validate.py tests/test_cli.py tests/insitu
test-fake-machine: venv
	RLM_FAKE_MACHINE=1 $(PYTEST) -q --durations=5 -m "not notebook and not slow" $(FAKE_MACHINE_TESTS)

# The slow tests (each more than ~10 s on 2 cores: Ray runs and their kills and signals, torch.distributed
# parity, the GPU edition's rehearsal, concurrent writers); CI runs them after `make test`.
test-slow: venv
	$(PYTEST) -q --durations=30 -m "slow and not notebook and not extended" tests

# The slow tests CI leaves out for its time budget: more signal and node cases of the same mechanisms, the GPU
# archive's rehearsal, the tracer's overhead bound (the reference window end to end runs in make test).
test-extended: venv
	$(PYTEST) -q --durations=30 -m "extended and not notebook" tests

# The notebooks under nbval (each .ipynb top to bottom at smoke size in this venv). The book build of `make test`
# executes the same cells (the paired .md; tests/test_notebooks.py checks the pairs) and fails on any error, so
# `make test` does not run them twice.
test-nbval: venv
	RLM_SIZE=smoke $(PYTEST) -q --nbval-lax --nbval-current-env --nbval-cell-timeout=300 notebooks

# Tests marked `notebook`: the book built at smoke size with warnings as errors, then its pages checked.
test-book: venv
	$(PYTEST) -q -m notebook tests

# Every chapter's committed references re-measured in one window on this machine (in-situ calibration first, then
# the protocol; about 64 min at cpu size on 2 quiet cores, the whole book within 90): rlm_lab/reference.py.
# REFERENCE_OUT=data/runs/cpu/reference/<window> to commit them (run it alone: flock -x /tmp/rlm-lab-measure.lock make reference ...).
REFERENCE_OUT ?= _build/reference/$(SIZE)
reference: venv
	$(BIN)/rlm-lab reference --all --size $(SIZE) --out $(REFERENCE_OUT)

# After editing a notebook's .md, refresh its paired output-free .ipynb (and vice versa).
notebooks: venv
	$(BIN)/jupytext --sync notebooks/*.md

clean:
	rm -rf _build book/_build

# ---- the GPU edition (issue: one prepared script for a lent GPU; rlm_lab/gpu_archive.py) -------------------
# A lent GPU machine has its own python3 with CUDA torch and no package registry, so it gets no .venv: the pinned
# packages its image lacks travel as wheels in .whl/ (git-ignored), fetched here first with `make gpu-wheels`.
# Then, through the device tool:  run(command="make gpu-archive GPU_OUT=$OUT", carry=[".whl"], timeout_s=600)
# and bring back $OUT/gpu-archive.tgz; `rlm-lab gpu-archive --adopt DIR` copies its records into data/ (`--stamped`
# keeps a later window of the same steps beside the earlier records: the archive's creation time in each record's name).
# The device tool sends at most 64 MiB and data/runs alone is over 90: for the call, commit first, then leave the
# records out of the index (`git rm -r -q --cached data/runs; echo /data/runs/ >> .git/info/exclude`; no step reads
# them) and put them back after (`git reset -q -- data/runs` and delete that line). scipy (35 MB) and pyarrow (55 MB)
# are not carried: the image has both (first lease, 2026-12-04: the archive ran with them).
GPU_BUDGET_S ?= 540
GPU_PY ?= python3
GPU_OUT ?=
GPU_SITE := _build/gpu-site
GPU_ARCHIVE_DIR ?= _build/gpu-archive/latest
GPU_WHEELS_DIR ?= .whl
GPU_WHEELS := trl transformers datasets peft huggingface_hub httpx2 httpcore2 truststore dill multiprocess \
	regex tokenizers click hf-xet fsspec typer anyio idna filelock
gpu-wheels:
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d $(GPU_WHEELS_DIR) $$(for p in $(GPU_WHEELS); do grep -i "^$$p==" constraints.txt; done)
	@du -sh $(GPU_WHEELS_DIR)

gpu-archive:
	@if [ -n "$(GPU_WHEELS_DIR)" ] && [ -d "$(GPU_WHEELS_DIR)" ]; then $(GPU_PY) -m pip install -q --no-index --no-deps \
		--no-compile --upgrade --target $(GPU_SITE) $(GPU_WHEELS_DIR)/*.whl; fi
	PYTHONUNBUFFERED=1 PYTHONPATH=$(CURDIR)/$(GPU_SITE):$(CURDIR) $(GPU_PY) -m rlm_lab.cli gpu-archive \
		--budget-s $(GPU_BUDGET_S) --out $(GPU_ARCHIVE_DIR) $(GPU_ARGS); rc=$$?; \
	if [ -n "$(GPU_OUT)" ]; then tar czf $(GPU_OUT)/gpu-archive.tgz -C $(dir $(abspath $(GPU_ARCHIVE_DIR))) $(notdir $(abspath $(GPU_ARCHIVE_DIR))); fi; exit $$rc

# ---- a cluster on one box (issue 40; rlm_lab.cluster_rehearsal.py) -------------------------------------------
# The README's Ray-job recipe on 3 "machines" of this box, each a mount namespace of its own (its own /tmp and HOME,
# the driver's checkout hidden): the token step, the head, 2 workers joining, `ray job submit --working-dir=.` of
# chapter 5's disaggregated placement; the job's weights and rewards must equal one node's. Needs Linux, unshare
# (root or user namespaces) and the cluster extra (ray[default], in requirements-test.txt). Traffic stays on 127.0.0.1.
# CI runs it in its slow phase (tests/test_cluster_rehearsal.py, marked slow).
cluster-rehearsal: venv
	$(BIN)/python -m rlm_lab.cli cluster-rehearsal
