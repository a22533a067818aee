#!/usr/bin/env bash
# A bundle on an NVIDIA Triton server: write the model repository, serve it, ask it.
#
#   examples/triton_repo.sh BUNDLE [REPO]        (from the repository root, after `make triton-venv`)
#
# The repository is one Python-backend model (EdgeSession inside, text in, the task's result out); add
# `--backend onnxruntime` for the graph on Triton's onnxruntime backend behind a tokenizer and an ensemble (the
# server below has no onnxruntime backend: serve that one in NVIDIA's container). On a real server:
#   docker run --rm -p 8000:8000 -v "$PWD/$REPO:/models" nvcr.io/nvidia/tritonserver:<yy.mm>-py3 \
#     bash -c "pip install 'edgebert[cpu]' && tritonserver --model-repository /models"
# with --cores the server's cores (instances x threads never exceed them) and the bundle packed for its CPU
# (--target x86-vnni, arm64 ...: one the bundle was exported with).
set -euo pipefail
BUNDLE=${1:?usage: examples/triton_repo.sh BUNDLE [REPO]}
REPO=${2:-runs/triton-repo}

# .venv-triton has edgebert[cpu] and tritonclient (the config schema); any install with 'edgebert[cpu,triton]' will do
.venv-triton/bin/edgebert triton-repo "$BUNDLE" --out "$REPO" --overwrite

# Here: the tritonserver binary the nvidia-pytriton wheel ships (its own venv, numpy < 2: make triton-venv),
# on 127.0.0.1 (benchmarks/triton_load.py starts it), asked with tritonclient in one request of three texts.
.venv-triton/bin/python - "$REPO" <<'EOF'
import json, sys
from pathlib import Path

sys.path.insert(0, "benchmarks")
import tritonclient.http as http
from triton_load import TritonServer, infer

repo = Path(sys.argv[1])
model = json.loads((repo / ".edgebert-triton.json").read_text())["models"][-1]
with TritonServer([repo]) as server:
    client = http.InferenceServerClient(server.url)
    meta = client.get_model_metadata(model)
    inputs = [i["name"] for i in meta["inputs"]]
    rows = {"question": ["who made the film"] * 3, "context": ["the director made the film"] * 3} \
        if inputs == ["question", "context"] else {"text": ["the film was good", "a dull movie", "charming"]}
    out = infer(client, model, rows, [o["name"] for o in meta["outputs"]])
    for name, value in out.items():
        print(name, value.shape, value[:, :4] if value.dtype != object else value.reshape(-1))
EOF
