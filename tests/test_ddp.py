"""Two CPU processes under torchrun (DDP, gloo) train to the same weights as one process with the
same global batch. Dropout is 0 in the tiny recipe, so the processes' RNG streams do not matter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from edgebert.data.corpus import builtin_corpus
from edgebert.data.tokenizer import save_tokenizer, train_tokenizer
from edgebert.stages.pretrain import PretrainConfig, pretrain

WORKER = textwrap.dedent("""
    import sys
    from edgebert.stages.pretrain import PretrainConfig, pretrain
    corpus, tok, out = sys.argv[1:4]
    cfg = PretrainConfig.preset("tiny", out, corpus=(corpus,), vocab=tok, max_seq_len=32,
                                train=dict(max_steps=6, batch_size=8, grad_accum=1, warmup_steps=1,
                                           log_every=1, eval_every=3, progress=False))
    result = pretrain(cfg)
    import torch.distributed  # the group is torn down again after training
    assert not torch.distributed.is_initialized()
    import os  # one write(2) per rank: lines of the two ranks cannot interleave on the shared pipe
    os.write(1, f"RESULT {result.step} {result.eval_metrics.get('mlm_accuracy')}\\n".encode())
""")


def _losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path):
    docs = builtin_corpus()[:40]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(d.replace("\n", " ") for d in docs), encoding="utf-8")
    tok = save_tokenizer(train_tokenizer(docs, 1000), tmp_path / "tok")
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")

    env = {**os.environ, "OMP_NUM_THREADS": "1", "EDGEBERT_DEBUG": "1"}
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(script), str(corpus), str(tok), str(tmp_path / "ddp")],
        capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.count("RESULT 6") == 2  # both ranks finished; only rank 0 has eval metrics

    # one process, same global batch of 8: grad_accum=2 gives the same two micro-batches of 4
    torch.set_num_threads(1)
    single = pretrain(PretrainConfig.preset(
        "tiny", tmp_path / "single", corpus=(corpus,), vocab=tok, max_seq_len=32,
        train=dict(max_steps=6, batch_size=8, grad_accum=2, warmup_steps=1, log_every=1, eval_every=3,
                   progress=False)))

    from safetensors.torch import load_file

    ddp_w = load_file(str(tmp_path / "ddp" / "model.safetensors"))
    one_w = load_file(str(tmp_path / "single" / "model.safetensors"))
    assert ddp_w.keys() == one_w.keys()
    diff = max((ddp_w[k] - one_w[k]).abs().max().item() for k in ddp_w)
    assert diff < 1e-5, diff
    assert single.step == 6
    a, b = _losses(tmp_path / "ddp"), _losses(tmp_path / "single")
    assert len(a) == len(b) == 6 and max(abs(x - y) for x, y in zip(a, b)) < 1e-5
    # only rank 0 wrote: one log line per step, eval lines from rank 0 only
    records = [json.loads(l) for l in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 7))
    assert records[2]["eval_mlm_accuracy"] == pytest.approx(
        json.loads((tmp_path / "single" / "metrics.jsonl").read_text().splitlines()[2])["eval_mlm_accuracy"],
        abs=1e-6)
