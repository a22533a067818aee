"""`edgebert pretrain` and `edgebert.pretrain.pretrain`: end to end on small corpora, resume, and
one-line errors for every bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from edgebert.cli import main
from edgebert.data.corpus import builtin_corpus
from edgebert.errors import ConfigError
from edgebert.stages.pretrain import PretrainConfig, build_pretrain_config, pretrain
from edgebert.training import checkpoint_dir


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Sixty sections of Python's documentation as a plain-text corpus (blank-line separated)."""
    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    path.write_text("\n\n".join(d.replace("\n", " ") for d in builtin_corpus()[:60]), encoding="utf-8")
    return path


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["pretrain", *args])
    out, err = capsys.readouterr()
    return code, out, err


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_cli_pretrains_evaluates_and_resumes(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = run_cli(capsys, "--preset", "tiny", "--corpus", str(corpus), "--out", str(out),
                                "--max-steps", "12", "--eval-every", "6", "--no-progress")
    assert code == 0, err
    assert f"checkpoint: {out}" in stdout and "mlm_accuracy" in stdout and "unigram baseline" in stdout
    for name in ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "tokenizer_config.json",
                 "special_tokens_map.json", "checkpoint.json", "metrics.jsonl", "pretrain_config.json"):
        assert (out / name).is_file(), name
    assert (out / "checkpoints" / "step-0000012" / "training_state.pt").is_file()   # the set the pointer names
    recs = records(out)
    assert [r["step"] for r in recs] == list(range(1, 13))
    ev = recs[-1]
    for key in ("eval_mlm_accuracy", "eval_mlm_perplexity", "eval_nsp_accuracy", "eval_unigram_mlm_accuracy"):
        assert key in ev and key in recs[5]
    assert 0 <= ev["eval_mlm_accuracy"] <= 1 and 0 <= ev["eval_nsp_accuracy"] <= 1
    assert ev["eval_mlm_perplexity"] == pytest.approx(torch.exp(torch.tensor(ev["eval_mlm_loss"])).item(), rel=1e-4)
    assert ev["eval_mlm_perplexity"] < 1000  # vocab is 1000: it learned something in 12 steps
    # the same fixed eval set is used at every evaluation
    assert recs[5]["eval_masked_tokens"] == ev["eval_masked_tokens"]
    assert 0 < ev["eval_unigram_mlm_accuracy"] < 0.2

    from edgebert.data.tokenizer import load_tokenizer
    from edgebert.model import load_model

    model = load_model(out)
    assert type(model).__name__ == "BertForPreTraining"
    assert model.config.vocab_size == load_tokenizer(out).get_vocab_size()

    # --resume needs no other option (it reads pretrain_config.json); --max-steps extends the run
    code, stdout, err = run_cli(capsys, "--out", str(out), "--resume", "--max-steps", "16", "--no-progress")
    assert code == 0, err
    assert [r["step"] for r in records(out)] == list(range(1, 17))
    assert "step 16" in stdout


@pytest.fixture(scope="module")
def tokenizer_dir(corpus, tmp_path_factory) -> Path:
    """One trained tokenizer for runs that must match: WordPiece training in `tokenizers` breaks
    count ties in hash-map order, so two trainings can differ (huggingface/tokenizers#1794)."""
    from edgebert.data.tokenizer import save_tokenizer, train_tokenizer

    docs = corpus.read_text(encoding="utf-8").split("\n\n")
    return save_tokenizer(train_tokenizer(docs, 1000), tmp_path_factory.mktemp("tok"))


def test_library_resume_matches_an_uninterrupted_run(corpus, tokenizer_dir, tmp_path):
    base = PretrainConfig.preset("tiny", tmp_path / "full", corpus=(corpus,), vocab=tokenizer_dir,
                                 train=dict(max_steps=8, log_every=1, eval_every=0, progress=False))
    full = pretrain(base)
    pretrain(base.replace(out=tmp_path / "half"), stop_at_step=4)
    resumed = pretrain(base.replace(out=tmp_path / "half", resume=True))
    a = [r["loss"] for r in records(tmp_path / "full")]
    b = [r["loss"] for r in records(tmp_path / "half")]
    assert len(a) == len(b) == 8
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-6
    assert resumed.eval_metrics["mlm_accuracy"] == pytest.approx(full.eval_metrics["mlm_accuracy"], abs=1e-9)
    from safetensors.torch import load_file

    wa, wb = load_file(str(tmp_path / "full" / "model.safetensors")), load_file(str(tmp_path / "half" / "model.safetensors"))
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6


def test_builtin_corpus_and_existing_vocab(tmp_path, capsys):
    from conftest import shared_file

    vocab = shared_file("bert-base-uncased-vocab", "vocab.txt")
    out = tmp_path / "builtin"
    code, stdout, err = run_cli(capsys, "--preset", "tiny", "--out", str(out), "--vocab", str(vocab),
                                "--max-steps", "3", "--max-seq-len", "32", "--no-progress")
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 30522
    assert (out / "vocab.txt").read_text(encoding="utf-8").splitlines()[101] == "[CLS]"
    cfg = json.loads((out / "pretrain_config.json").read_text())
    assert cfg["corpus"] == [] and cfg["max_seq_len"] == 32


def test_transformers_loads_the_checkpoint(corpus, tmp_path):
    transformers = pytest.importorskip("transformers")
    from edgebert.model import load_model

    out = tmp_path / "hf"
    pretrain(PretrainConfig.preset("tiny", out, corpus=(corpus,),
                                   train=dict(max_steps=2, warmup_steps=0, progress=False)))
    hf = transformers.BertForPreTraining.from_pretrained(str(out)).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(str(out))
    enc = tok("The assert statement.", "It raises an error.", return_tensors="pt")
    ours = load_model(out).eval()
    with torch.no_grad():
        ref = hf(**enc).prediction_logits
        got = ours(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).prediction_logits
    assert (ref - got).abs().max().item() < 1e-4


def test_config_presets():
    cfg = build_pretrain_config("runs/x", "wiki-small", corpus=("a.txt",), train=dict(lr=1e-3))
    assert cfg.train.lr == 1e-3 and cfg.train.max_steps == 1000 and cfg.vocab_size == 12000
    assert cfg.bert_config(12000, 0).hidden_size == 256
    small = build_pretrain_config("runs/x", "wiki-small", model_size="small")
    assert small.model_overrides == {} and small.bert_config(100, 0).hidden_size == 512
    # a short run of a long recipe: warmup is the recipe's fraction (8%) of the run
    assert build_pretrain_config("runs/x", "wiki-small", train=dict(max_steps=50)).train.resolved_warmup_steps() == 4
    with pytest.raises(ConfigError, match="warmup_steps=80 must be smaller than max_steps=50"):
        build_pretrain_config("runs/x", "wiki-small", train=dict(max_steps=50, warmup_steps=80))
    with pytest.raises(ConfigError, match="max_seq_len=1024 is longer"):
        build_pretrain_config("runs/x", "tiny", max_seq_len=1024).bert_config(100, 0)


def _bad_config(tmp_path: Path) -> Path:
    path = tmp_path / "bad_config.json"
    path.write_text(json.dumps({"model_type": "bert", "hidden_size": 100, "num_attention_heads": 12,
                                "num_hidden_layers": 2, "intermediate_size": 256}), encoding="utf-8")
    return path


def _corrupt_checkpoint(tmp_path: Path, corpus: Path) -> Path:
    out = tmp_path / "ckpt"
    pretrain(PretrainConfig.preset("tiny", out, corpus=(corpus,),
                                   train=dict(max_steps=2, warmup_steps=0, progress=False)))
    (checkpoint_dir(out) / "training_state.pt").write_bytes(b"\x00garbage")
    return out


BAD_INPUTS = {
    "missing corpus": lambda t, c: ["--corpus", str(t / "nope.txt"), "--out", str(t / "o")],
    "empty corpus": lambda t, c: ["--corpus", str(_write(t / "empty.txt", b"\n \n")), "--out", str(t / "o")],
    "non-utf8 corpus": lambda t, c: ["--corpus", str(_write(t / "bad.txt", b"ok\n\xff\xfe")), "--out", str(t / "o")],
    "negative lr": lambda t, c: ["--corpus", str(c), "--lr", "-1", "--out", str(t / "o")],
    "warmup > steps": lambda t, c: ["--corpus", str(c), "--warmup-steps", "30", "--max-steps", "10", "--out", str(t / "o")],
    "bad model config": lambda t, c: ["--corpus", str(c), "--config", str(_bad_config(t)), "--out", str(t / "o")],
    "unknown model size": lambda t, c: ["--corpus", str(c), "--model-size", "giant", "--out", str(t / "o")],
    "unknown preset": lambda t, c: ["--preset", "forever", "--out", str(t / "o")],
    "corrupt checkpoint": lambda t, c: ["--corpus", str(c), "--out", str(_corrupt_checkpoint(t, c)), "--resume",
                                        "--preset", "tiny"],
    "resume without checkpoint": lambda t, c: ["--out", str(t / "fresh"), "--resume"],
    "existing checkpoint": lambda t, c: ["--corpus", str(c), "--out", str(_corrupt_checkpoint(t, c))],
    "model size and config": lambda t, c: ["--model-size", "tiny", "--config", str(_bad_config(t)), "--out", str(t / "o")],
    "zero grad accum": lambda t, c: ["--grad-accum", "0", "--out", str(t / "o")],
    "bad format": lambda t, c: ["--corpus", str(c), "--corpus-format", "xml", "--out", str(t / "o")],
}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_inputs_give_one_line_errors(case, corpus, tmp_path, capsys):
    args = BAD_INPUTS[case](tmp_path, corpus)
    if "--preset" not in args:
        args += ["--preset", "tiny"]
    code, stdout, err = run_cli(capsys, *args, "--no-progress")
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err + stdout
    assert "unexpected" not in lines[0]  # a user error, not a crash
    assert not (tmp_path / "o").exists()          # issue 13, defect 3: nothing half-written either


def test_error_messages_say_what_was_wrong(tmp_path, corpus, capsys):
    bad = _write(tmp_path / "wiki.bad", b"line one\nline two\nab\xffc\n")
    _, _, err = run_cli(capsys, "--corpus", str(bad), "--out", str(tmp_path / "o"), "--preset", "tiny")
    assert f"{bad}:3 is not UTF-8 (byte 0xff at column 3)" in err
    _, _, err = run_cli(capsys, "--corpus", str(corpus), "--config", str(_bad_config(tmp_path)),
                        "--out", str(tmp_path / "o"), "--preset", "tiny")
    assert "hidden_size=100 is not divisible by num_attention_heads=12" in err
    _, _, err = run_cli(capsys, "--lr", "-1", "--out", str(tmp_path / "o"))
    assert "lr=-1.0 must be a positive number" in err
    assert not (tmp_path / "o").exists()  # nothing written for a bad config


def test_resume_on_other_data_is_refused(corpus, tokenizer_dir, tmp_path):
    from edgebert.errors import CheckpointError

    base = PretrainConfig.preset("tiny", tmp_path / "run", corpus=(corpus,), vocab=tokenizer_dir,
                                 train=dict(max_steps=4, warmup_steps=0, progress=False))
    pretrain(base, stop_at_step=2)
    with pytest.raises(CheckpointError, match="other data|examples"):
        pretrain(base.replace(resume=True, dupe_factor=2))
    with pytest.raises(CheckpointError, match="other data"):
        pretrain(base.replace(resume=True, short_seq_prob=0.3))


def test_pretraining_learns_beyond_the_unigram_baseline(tmp_path):
    """On templated text a tiny model quickly learns what the unigram baseline cannot."""
    import random

    rng = random.Random(0)
    names, foods = ["Anna", "Bert", "Carl", "Dora", "Emil", "Fred"], ["rice", "bread", "soup", "fish"]
    docs = [" ".join(f"{rng.choice(names)} likes {rng.choice(foods)} and sleeps at {rng.randint(1, 12)} "
                     "o'clock." for _ in range(12)) for _ in range(40)]
    corpus = tmp_path / "templated.txt"
    corpus.write_text("\n\n".join(docs), encoding="utf-8")
    result = pretrain(PretrainConfig.preset(
        "tiny", tmp_path / "run", corpus=(corpus,), vocab_size=200, max_seq_len=32, eval_fraction=0.25,
        train=dict(max_steps=60, batch_size=16, lr=3e-3, warmup_steps=6, eval_every=0, progress=False)))
    ev = result.eval_metrics
    assert ev["masked_tokens"] >= 150
    assert ev["mlm_accuracy"] > ev["unigram_mlm_accuracy"] + 0.15, ev
    assert ev["mlm_perplexity"] < 30  # from ~200 (uniform over the vocabulary) at initialisation


def test_two_runs_with_the_same_seed_are_identical(corpus, tmp_path, capsys):
    """issue 13, defect 4: the tokenizer is trained in each run (no shared vocab), yet the vocabulary
    files are byte-identical and every logged loss and every weight is equal."""
    for name in ("a", "b"):
        code, _, err = run_cli(capsys, "--preset", "tiny", "--corpus", str(corpus), "--out", str(tmp_path / name),
                               "--max-steps", "6", "--seed", "7", "--no-progress")
        assert code == 0, err
    a, b = tmp_path / "a", tmp_path / "b"
    for name in ("vocab.txt", "tokenizer.json", "config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    losses = [[(r["step"], r["loss"], r.get("eval_mlm_loss")) for r in records(run)] for run in (a, b)]
    assert len(losses[0]) == 6 and losses[0] == losses[1]
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
