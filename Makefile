# Set-up and everyday commands. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0

.PHONY: demo test install dev clean sandbox

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch is pinned and installed first: this version is the CPU wheel these machines carry, and a bare
# `torch` requirement would otherwise pull several GB of CUDA packages.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet torch==$(TORCH_VERSION)
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed
dev: $(VENV)/.installed-dev

demo: $(VENV)/.installed
	$(BIN)/rlvr demo --out demo_out --seed 0

# The code verifier's sandbox needs bubblewrap (Debian's package); as root it is installed here, otherwise
# `rlvr` reports that it is missing and refuses to run untrusted code without network isolation.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "bubblewrap is missing: install it (apt-get install bubblewrap) for the code sandbox" >&2; fi; }

test: $(VENV)/.installed-dev sandbox
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) demo_out runs .pytest_cache
