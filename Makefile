# warmfit — `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
WARMFIT := $(VENV)/bin/warmfit
# torch is installed first, pinned, so that set-up never pulls a multi-GB CUDA
# build on a machine without a GPU (2.13.0 is the CPU wheel this machine has).
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed-stamp
# The demo's venv needs warmfit's core only (typer, polars, pyarrow): no torch, no extras.
CORE_STAMP := $(VENV)/.core-stamp

.DEFAULT_GOAL := help
.PHONY: help venv demo demo-hf test test-fast test-slow lint format bench traces expectations notebook clean bench-record smoke-core mutants mutants-generated

help: ## List the targets.
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@echo "make: creating the virtual environment $(VENV) (once; later runs reuse it)"
	$(PYTHON) -m venv $(VENV)
	@echo "make: installing $(TORCH_SPEC), the CPU wheel (a few minutes the first time)"
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	@echo "make: installing warmfit with every extra: dev, torch, plot, lightning, transformers, cluster"
	$(PY) -m pip install -q -e ".[dev,torch,plot,lightning,transformers,cluster]" "$(TORCH_SPEC)"
	@touch $(STAMP)
	@echo "make: $(VENV) is ready"

venv: $(STAMP) ## Create .venv with every extra (torch pinned: TORCH_SPEC).

# A .venv made by `make venv` already holds the core; otherwise install the core alone.
$(CORE_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then :; else \
		echo "make: installing warmfit's core (typer, polars, pyarrow) into $(VENV)"; \
		$(PYTHON) -m venv $(VENV) && $(PY) -m pip install -q -e . ; fi
	@touch $(CORE_STAMP)

demo: $(CORE_STAMP) ## Print the table of ART PR #991 from traces/pr991 (core install only, ~1 min).
	$(WARMFIT) replay traces/pr991
	$(WARMFIT) replay traces/pr991 --format markdown

demo-hf: $(STAMP) ## Re-record traces/hf-qwen3moe-cpu (HF Trainer, random Qwen3-MoE, CPU).
	HF_HUB_OFFLINE=1 $(WARMFIT) record -o traces/hf-qwen3moe-cpu --force -- \
		$(PY) -m warmfit.integrations.hf_demo
	$(WARMFIT) replay traces/hf-qwen3moe-cpu --by signature -p max-merge -p warm-fit -p warm-affine

# The suite's tests run in parallel on every core, at most 4 (pytest-xdist; each test keeps
# its own tmp_path and TMPDIR). `make test TEST_JOBS=` runs them in one process.
TEST_JOBS ?= -n auto --maxprocesses 4 --dist worksteal

test: $(STAMP) ## Run the test suite (not slow, not gpu) on every core.
	$(PY) -m pytest -q --hypothesis-profile=ci $(TEST_JOBS)

# The unit tests a contributor runs while editing: policies, rules, engines, the format, the
# CLI's basics; no recordings, no worker processes, no long property runs (make test runs all).
FAST_TESTS := tests/test_policies.py tests/test_rule.py tests/test_envelope.py \
	tests/test_warm_affine.py tests/test_replay.py tests/test_seen_range.py tests/test_trace.py \
	tests/test_pagecrc.py tests/test_perwave.py \
	tests/test_outputs.py tests/test_cli.py tests/test_progress.py tests/test_architecture.py

test-fast: $(STAMP) ## Run the unit tests for editing (about 35 s; make test runs everything).
	$(PY) -m pytest -q $(FAST_TESTS)

test-slow: $(STAMP) ## Run the slow tests too (thousands of generated traces).
	$(PY) -m pytest -q -m "not gpu" $(TEST_JOBS)

lint: $(STAMP) ## ruff (lint and format check) and mypy.
	$(VENV)/bin/ruff check warmfit tests
	$(VENV)/bin/ruff format --check warmfit tests
	$(VENV)/bin/mypy

format: $(STAMP) ## Apply ruff's formatting and safe fixes.
	$(VENV)/bin/ruff format warmfit tests
	$(VENV)/bin/ruff check --fix warmfit tests

traces: $(STAMP) ## Regenerate traces/pr991, and art-h200 and liger-gpu by warmfit import (byte-identical).
	$(PY) -m warmfit.samples.synthetic traces/pr991
	$(WARMFIT) import table traces/art-h200/source/recompute_memory_final.csv --force \
		--map traces/art-h200/source/map.toml -o traces/art-h200/recompute_memory_final.parquet
	$(WARMFIT) import table traces/art-h200/source/recompute_memory_final.csv --force \
		--map traces/art-h200/source/shuffled.toml -o traces/art-h200/shuffled.parquet
	$(WARMFIT) import table traces/liger-gpu/source/all_benchmark_data.csv --force \
		--map traces/liger-gpu/source/map.toml -o traces/liger-gpu/ascending.parquet
	$(WARMFIT) import table traces/liger-gpu/source/all_benchmark_data.csv --force \
		--map traces/liger-gpu/source/shuffled.toml -o traces/liger-gpu/shuffled.parquet

# --allow-under: the gate records every policy's figures as they are, waves under their
# peak included (max-merge and warm-fit on the shuffled ART rows, every policy on
# Liger's curves), so that any worsening fails; check prints one warning per policy.
expectations: $(STAMP) ## Rewrite traces/expectations.toml from traces/.
	$(WARMFIT) check traces --write-expect traces/expectations.toml --force \
		-p max-merge -p warm-fit -p warm-affine -p envelope --allow-under

smoke-core: ## Install without extras (no torch/matplotlib); use the CLI.
	rm -rf .venv-core && $(PYTHON) -m venv .venv-core
	.venv-core/bin/python -m pip install -q .
	.venv-core/bin/warmfit --help > /dev/null
	.venv-core/bin/warmfit replay traces/pr991 --format markdown
	.venv-core/bin/warmfit check traces --expect traces/expectations.toml --format csv > /dev/null
	.venv-core/bin/warmfit plot traces/pr991 -o .venv-core/x.png 2>&1 | grep -q "needs matplotlib"
	.venv-core/bin/python -c "import sys, warmfit.recorder; assert not {'torch', 'polars'} & set(sys.modules)"
	.venv-core/bin/python -c "import sys, warmfit.integrations, warmfit.integrations.tokens; \
		assert not {'torch', 'lightning', 'transformers'} & set(sys.modules)"
	.venv-core/bin/python -c "import warmfit.integrations.lightning" 2>&1 | grep -q "warmfit\[lightning\]"
	.venv-core/bin/python -c "import warmfit.integrations.sampler" 2>&1 | grep -q "warmfit\[torch\]"
	.venv-core/bin/python -c "import sys, warmfit; warmfit.Pricer('warm-fit'); assert 'torch' not in sys.modules"
	.venv-core/bin/python -m warmfit.integrations.hf_demo 2>&1 | grep -q "needs torch and transformers"
	.venv-core/bin/python -m warmfit.samples.demo 2>&1 | grep -q "needs torch"
	@echo "core install works without torch, matplotlib, lightning and transformers"

notebook: $(STAMP) ## Re-execute notebooks/tour.ipynb and store it with its outputs.
	$(PY) notebooks/execute.py

clean: ## Remove the virtual environments and caches.
	rm -rf $(VENV) .venv-core .pytest_cache .mypy_cache .ruff_cache .hypothesis

bench-record: $(STAMP) ## Recorder cost per reading; 1M readings written (JSON: benchmarks/results/).
	$(PY) benchmarks/bench_record.py

mutants: $(STAMP) ## Plant each bug of mutants/mutants.toml in a copy; fail on a survivor.
	$(PY) mutants/run.py

# The generated pass: every small mutant of the core modules' syntax trees (mutants/generate.py),
# each run against the tests that ran its line; survivors must be in mutants/generated.toml.
# WORKERS mutants run at once; REPORT names the JSON report (default: under the temp dir).
mutants-generated: $(STAMP) ## Generate mutants of the core modules (AST); fail on an unaccepted survivor.
	$(PY) mutants/run.py --generate --workers $(or $(WORKERS),2) $(if $(REPORT),--report $(REPORT))

bench: $(STAMP) ## Replay 1e5-1e7 readings (SIZES="1e8" too) beside a bare scan, every command beside replay at 1e7, plot 1e5 waves, Pricer.price per call, BudgetSampler vs a fixed batch under a simulated memory cap; JSON: benchmarks/results/.
	$(PY) benchmarks/bench_replay.py $(if $(SIZES),--sizes $(SIZES))
	$(PY) benchmarks/bench_commands.py
	$(PY) benchmarks/bench_plot.py
	$(PY) benchmarks/bench_price.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_admission.py
