# localsession: `make demo` runs a real SFT loop; `make test` runs the test suite.
# Both create (or reuse) a virtualenv in $(VENV).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.localsession-installed
SDK_STAMP := $(VENV)/.sagemaker-sdk-installed

.PHONY: demo examples test test-unit test-slow bench lint typecheck check clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# Install torch 2.13.0 first where none is present: an unpinned torch pulls a multi-GB
	# CUDA build. An existing torch (CUDA or not) is kept; pyproject's range admits it.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The real SDK, for the parity and server tests: sagemaker-core (its Hub client) and boto3,
# then sagemaker-train itself without its heavy training deps (docs/wire.md#1).
$(SDK_STAMP): $(STAMP)
	$(PY) -m pip install --quiet sagemaker-core==2.27.0 "boto3>=1.44.8"
	$(PY) -m pip install --quiet --no-deps sagemaker-train==1.27.0
	touch $(SDK_STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m localsession demo

# Every example, full length, one after another (each writes runs/<name>-<time>/).
examples: $(STAMP)
	for script in sft_chat grpo_math code_rl preference distillation; do \
		HF_HUB_OFFLINE=1 $(PY) examples/$$script.py || exit 1; done

test: $(SDK_STAMP) lint typecheck
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

# The fast tier: everything but the tests marked `integration` (processes, servers, crashes,
# load, soak, examples, conformance runs); well under a minute.
test-unit: $(SDK_STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m 'not slow and not gpu and not integration'

test-slow: $(SDK_STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m slow

bench: $(SDK_STAMP)
	HF_HUB_OFFLINE=1 $(PY) bench/run_all.py

lint: $(STAMP)
	$(PY) -m ruff check localsession fakes conformance tests examples bench

typecheck: $(STAMP)
	$(PY) -m mypy

check: test

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
