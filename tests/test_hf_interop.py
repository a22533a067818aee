"""Hugging Face interop: import-hf (checks, refusals, atomic output, CLI errors), edgebert
checkpoints loading in transformers with no missing/unexpected keys, and MiniLM parity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import shared_file
from edgebert.cli import main
from edgebert.errors import CheckpointError, ConfigError, OutputError
from edgebert.model import BertForPreTraining, BertForSequenceClassification, BertModel, load_model, save_model
from edgebert.stages.import_hf import convert_hf, import_hf, output_tensors, probe_batch

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["Hello", "hello", "World", "world", "the", "movie", "is", "good", "bad", "."]


def write_vocab(path: Path, size: int) -> None:
    tokens = SPECIALS + WORDS
    tokens += [f"tok{i}" for i in range(size - len(tokens))]
    path.write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")


def hf_style_dir(tmp_path: Path, model, name: str = "hf", extra_keys: bool = True) -> Path:
    """An HF-like BERT dir from an edgebert model: adds the position_ids buffer and the tied
    decoder copies that transformers' .bin files carry, a vocab.txt and no tokenizer.json."""
    d = tmp_path / name
    save_model(model, d)
    sd = load_file(str(d / "model.safetensors"))
    if extra_keys:
        prefix = "bert." if any(k.startswith("bert.") for k in sd) else ""
        sd[f"{prefix}embeddings.position_ids"] = torch.arange(model.config.max_position_embeddings)[None]
        if "cls.predictions.bias" in sd:
            sd["cls.predictions.decoder.weight"] = sd[f"{prefix}embeddings.word_embeddings.weight"].clone()
            sd["cls.predictions.decoder.bias"] = sd["cls.predictions.bias"].clone()
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    write_vocab(d / "vocab.txt", model.config.vocab_size)
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    return d


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture
def pretraining_model(tiny_config):
    torch.manual_seed(0)
    return BertForPreTraining(tiny_config).eval()


# --------------------------------------------------------------------------- import: happy paths
def test_import_reports_drops_builds_tokenizer_and_reproduces_outputs(tmp_path, pretraining_model):
    src = hf_style_dir(tmp_path, pretraining_model)
    report = convert_hf(src, tmp_path / "out")
    out = report.out_dir
    assert report.architecture == report.source_architecture == "BertForPreTraining"
    assert report.dropped == {
        "bert.embeddings.position_ids": "buffer, recomputed by the model",
        "cls.predictions.decoder.weight": "tied to embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "tied to cls.predictions.bias",
    }
    assert report.max_abs_diff == 0.0
    assert sorted(p.name for p in out.iterdir()) == [".edgebert-out.json", "config.json", "model.safetensors",
                                                      "tokenizer.json", "tokenizer_config.json",
                                                      "vocab.txt"]   # the marker: written by import-hf
    assert report.tokenizer_built_from_vocab
    # reloaded checkpoint == the original model, bit for bit
    batch = probe_batch(pretraining_model.config, batch=3, seq=16)
    reloaded = load_model(out)
    assert type(reloaded) is BertForPreTraining
    assert max_diff(output_tensors(reloaded, batch), output_tensors(pretraining_model, batch)) == 0.0
    # tokenizer.json built from vocab.txt honours do_lower_case=False
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.encode("Hello world").tokens == ["[CLS]", "Hello", "world", "[SEP]"]
    assert tok.encode("a", "b").type_ids == [0, 0, 0, 1, 1]


def test_import_as_encoder_only_drops_heads(tmp_path, pretraining_model):
    src = hf_style_dir(tmp_path, pretraining_model)
    report = convert_hf(src, tmp_path / "enc", architecture="BertModel")
    assert report.architecture == "BertModel"
    heads = {k for k in report.dropped if k.startswith("cls.")}
    assert heads == {"cls.predictions.bias", "cls.predictions.decoder.bias",
                     "cls.predictions.decoder.weight", "cls.predictions.transform.LayerNorm.bias",
                     "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.dense.bias",
                     "cls.predictions.transform.dense.weight", "cls.seq_relationship.bias",
                     "cls.seq_relationship.weight"}
    enc = load_model(report.out_dir)
    assert type(enc) is BertModel
    batch = probe_batch(pretraining_model.config)
    with torch.no_grad():
        want = pretraining_model.bert(**batch).last_hidden_state
        got = enc(**batch).last_hidden_state
    assert torch.equal(got, want)


def test_import_keeps_sequence_classification_labels(tmp_path, tiny_config):
    torch.manual_seed(1)
    cfg = tiny_config.replace(id2label={0: "negative", 1: "neutral", 2: "positive"})
    model = BertForSequenceClassification(cfg).eval()
    src = hf_style_dir(tmp_path, model, extra_keys=False)
    out = import_hf(src, tmp_path / "cls")
    written = json.loads((out / "config.json").read_text())
    assert written["architectures"] == ["BertForSequenceClassification"]
    assert written["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
    assert written["label2id"] == {"negative": 0, "neutral": 1, "positive": 2}
    batch = probe_batch(cfg)
    assert max_diff(output_tensors(load_model(out), batch), output_tensors(model, batch)) == 0.0


# --------------------------------------------------------------------------- import: refusals
def _edit_weights(src: Path, fn) -> None:
    sd = load_file(str(src / "model.safetensors"))
    fn(sd)
    save_file(sd, str(src / "model.safetensors"))


def _edit_config(src: Path, **changes) -> None:
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(changes)
    (src / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("breakage, match", [
    (lambda src: _edit_weights(src, lambda sd: sd.pop("bert.encoder.layer.1.output.dense.weight")),
     "lacks encoder weights, e.g. bert.encoder.layer.1.output.dense.weight"),
    (lambda src: _edit_config(src, intermediate_size=96), r"6 weight\(s\) do not fit config.json.*\[128\] where the config needs \[96\]"),
    (lambda src: _edit_config(src, num_hidden_layers=1), "encoder weight bert.encoder.layer.1"),
    (lambda src: _edit_weights(src, lambda sd: sd.__setitem__(
        "cls.predictions.decoder.weight", torch.randn_like(sd["cls.predictions.decoder.weight"]))),
     "differs from the word embeddings"),
    (lambda src: _edit_weights(src, lambda sd: sd.pop("cls.seq_relationship.weight")),
     "no weights for cls.seq_relationship.weight"),
    (lambda src: write_vocab(src / "vocab.txt", 2000), "tokenizer has 2000 tokens but the model only 1024"),
], ids=["missing-encoder-weight", "shape-mismatch", "extra-layer", "untied-decoder", "missing-head",
        "tokenizer-too-big"])
def test_import_refuses_inconsistent_checkpoints_and_leaves_nothing(tmp_path, pretraining_model,
                                                                    breakage, match):
    src = hf_style_dir(tmp_path, pretraining_model)
    breakage(src)
    with pytest.raises(CheckpointError, match=match):
        import_hf(src, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]   # no out dir, no temp dir


def test_import_never_invents_a_head(tmp_path, tiny_config):
    torch.manual_seed(0)
    src = hf_style_dir(tmp_path, BertModel(tiny_config), extra_keys=False)
    with pytest.raises(CheckpointError, match=r"no weights for classifier.bias \(2 missing\) as BertForSequenceClassification"):
        import_hf(src, tmp_path / "out", architecture="BertForSequenceClassification")
    with pytest.raises(ConfigError, match="unknown architecture"):
        import_hf(src, tmp_path / "out", architecture="GPT2Model")


def test_existing_output_is_kept_unless_overwrite_and_survives_a_failed_import(tmp_path, pretraining_model):
    """issue 13, defect 2: --overwrite replaces an earlier import only, never a user's files."""
    src = hf_style_dir(tmp_path, pretraining_model)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputError, match="not empty and was not written by `edgebert import-hf`"):
        import_hf(src, out)
    with pytest.raises(OutputError, match="not empty and was not written by `edgebert import-hf`"):
        import_hf(src, out, overwrite=True)
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    import_hf(src, out)                                  # an empty folder is fine
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(OutputError, match="already holds the output of `edgebert import-hf`"):
        import_hf(src, out)
    write_vocab(src / "vocab.txt", 2000)  # makes the import fail after the weights were written
    with pytest.raises(CheckpointError, match="tokenizer has 2000 tokens"):
        import_hf(src, out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before   # the failed import changed nothing
    write_vocab(src / "vocab.txt", 1024)
    import_hf(src, out, overwrite=True)
    assert (out / "model.safetensors").exists()
    (out / "notes.txt").write_text("mine")               # a file of the user's in our folder ...
    with pytest.raises(OutputError, match=r"holds files `edgebert import-hf` did not write \(notes.txt\)"):
        import_hf(src, out, overwrite=True)              # ... is never deleted
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "out"]
    with pytest.raises(CheckpointError, match="would replace the source"):
        import_hf(src, tmp_path, overwrite=True)


# --------------------------------------------------------------------------- CLI
def test_cli_import_hf_prints_report(tmp_path, pretraining_model, capsys):
    src = hf_style_dir(tmp_path, pretraining_model)
    assert main(["import-hf", str(src), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "architecture: BertForPreTraining" in out
    assert "bert.embeddings.position_ids: buffer" in out
    assert "tokenizer.json built from vocab.txt" in out
    assert "max abs diff 0 " in out
    assert (tmp_path / "out" / "model.safetensors").exists()


def _no_config(src: Path) -> None:
    (src / "config.json").unlink()


def _gpt2(src: Path) -> None:
    _edit_config(src, model_type="gpt2")


def _corrupt_safetensors(src: Path) -> None:
    (src / "model.safetensors").write_bytes(b"\x00\x01garbage" * 10)


def _corrupt_bin(src: Path) -> None:
    (src / "model.safetensors").unlink()
    (src / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not really a zip" * 10)


@pytest.mark.parametrize("breakage, needle", [
    (None, "not found"),
    (_no_config, "no config.json"),
    (_gpt2, "model_type='gpt2' is not a BERT"),
    (_corrupt_safetensors, "not a readable safetensors file"),
    (_corrupt_bin, "could not be loaded with weights_only=True"),
])
def test_cli_import_hf_errors_are_one_line(tmp_path, tiny_config, capsys, breakage, needle):
    if breakage is None:
        src = tmp_path / "missing"
    else:
        torch.manual_seed(0)
        src = hf_style_dir(tmp_path, BertModel(tiny_config), extra_keys=False)
        breakage(src)
    rc = main(["import-hf", str(src), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- transformers
def padded_batch(cfg, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, cfg.vocab_size, (3, 14), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[:, 7:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def no_loading_problems(info: dict) -> bool:
    return not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]
                or info["error_msgs"])


@pytest.fixture
def transformers_quiet():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers


@pytest.mark.hf
def test_edgebert_checkpoints_load_in_transformers(tmp_path, tiny_config, pretraining_model,
                                                   transformers_quiet):
    tf = transformers_quiet
    save_model(pretraining_model, tmp_path / "pre")
    hf, info = tf.BertForPreTraining.from_pretrained(tmp_path / "pre", output_loading_info=True)
    assert no_loading_problems(info), info
    batch = padded_batch(tiny_config)
    with torch.no_grad():
        ref = pretraining_model(**batch)
        got = hf.eval()(**batch)
    assert (got.prediction_logits - ref.prediction_logits).abs().max() < 1e-5
    assert (got.seq_relationship_logits - ref.seq_relationship_logits).abs().max() < 1e-5

    # the encoder alone: a BertModel checkpoint loads cleanly ...
    torch.manual_seed(2)
    save_model(BertModel(tiny_config), tmp_path / "enc")
    _, info = tf.BertModel.from_pretrained(tmp_path / "enc", output_loading_info=True)
    assert no_loading_problems(info), info
    # ... and a pretraining checkpoint as BertModel leaves exactly the cls.* head keys unused
    _, info = tf.BertModel.from_pretrained(tmp_path / "pre", output_loading_info=True)
    file_heads = {k for k in load_file(str(tmp_path / "pre" / "model.safetensors")) if k.startswith("cls.")}
    assert not info["missing_keys"] and not info["mismatched_keys"]       # lists in transformers 4, sets in 5
    assert set(info["unexpected_keys"]) == file_heads and len(file_heads) == 7


@pytest.mark.hf
def test_sequence_classification_round_trip_with_labels(tmp_path, tiny_config, transformers_quiet):
    tf = transformers_quiet
    torch.manual_seed(3)
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    model = BertForSequenceClassification(tiny_config.replace(id2label=labels)).eval()
    save_model(model, tmp_path / "eb")
    hf, info = tf.BertForSequenceClassification.from_pretrained(tmp_path / "eb", output_loading_info=True)
    assert no_loading_problems(info), info
    assert hf.config.id2label == labels and hf.config.num_labels == 3
    batch = padded_batch(tiny_config)
    with torch.no_grad():
        hf_logits = hf.eval()(**batch).logits
    assert (hf_logits - model(**batch).logits).abs().max() < 1e-5
    # back again: transformers' save_pretrained -> import_hf
    hf.save_pretrained(tmp_path / "hf")
    back = load_model(import_hf(tmp_path / "hf", tmp_path / "back"))
    assert back.config.id2label == labels
    with torch.no_grad():
        assert (back(**batch).logits - hf_logits).abs().max() < 1e-5


@pytest.mark.hf
@pytest.mark.parametrize("arch, safe", [("BertForPreTraining", True), ("BertForPreTraining", False),
                                        ("BertForMaskedLM", True)],
                         ids=["pretraining-safetensors", "pretraining-bin", "masked-lm-safetensors"])
def test_transformers_checkpoints_import_with_same_outputs(tmp_path, transformers_quiet, arch, safe):
    tf = transformers_quiet
    torch.manual_seed(4)
    hf = getattr(tf, arch)(tf.BertConfig(
        vocab_size=1024, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128)).eval()
    hf.save_pretrained(tmp_path / "hf", safe_serialization=safe)
    if not safe and not (tmp_path / "hf" / "pytorch_model.bin").is_file():   # transformers 5 writes safetensors only
        (tmp_path / "hf" / "model.safetensors").unlink()
        torch.save(hf.state_dict(), tmp_path / "hf" / "pytorch_model.bin")   # the file 4.x and older checkpoints have
    report = convert_hf(tmp_path / "hf", tmp_path / "eb")
    assert report.architecture == arch
    assert report.weights_file == ("model.safetensors" if safe else "pytorch_model.bin")
    assert set(report.dropped) <= {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias",
                                   "bert.embeddings.position_ids"}
    model = load_model(report.out_dir)
    assert type(model).__name__ == arch
    batch = padded_batch(model.config)
    with torch.no_grad():
        want, got = hf(**batch, output_hidden_states=True), model(**batch)
    assert (got.encoder.last_hidden_state - want.hidden_states[-1]).abs().max() < 1e-5
    if arch == "BertForPreTraining":
        assert (got.prediction_logits - want.prediction_logits).abs().max() < 1e-5
        assert (got.seq_relationship_logits - want.seq_relationship_logits).abs().max() < 1e-5
    else:
        assert (got.logits - want.logits).abs().max() < 1e-5


# --------------------------------------------------------------------------- real model
FALLBACK_SENTENCES = [
    "a gorgeous , witty , seductive movie .",
    "bad .",
    "the acting , costumes , music , cinematography and sound are all astounding given the "
    "production 's austere locales .",
    "it 's a charming and often affecting journey .",
    "unflinchingly bleak and desperate",
    "the film is strictly routine .",
    "allows us to hope that nolan is poised to embark a major career as a commercial yet inventive "
    "filmmaker .",
    "ok",
]


def sst2_sentences(n: int = 8) -> list[str]:
    """``n`` SST-2 dev sentences spread over the length range (the built-in ones if absent)."""
    try:
        path = shared_file("sst2", "dev.tsv")
    except pytest.skip.Exception:
        return FALLBACK_SENTENCES[:n]
    rows = path.read_text(encoding="utf-8").splitlines()[1:81]
    by_length = sorted((r.split("\t")[0].strip() for r in rows), key=len)
    return [by_length[i * (len(by_length) - 1) // (n - 1)] for i in range(n)]


@pytest.mark.hf
def test_minilm_import_matches_transformers(tmp_path, minilm_dir, transformers_quiet):
    tf = transformers_quiet
    from tokenizers import Tokenizer

    report = convert_hf(minilm_dir, tmp_path / "minilm")
    assert report.architecture == "BertModel" and report.max_abs_diff == 0.0
    assert set(report.dropped) == {"embeddings.position_ids"}
    assert {"tokenizer.json", "vocab.txt"} <= set(report.tokenizer_files)

    tok = Tokenizer.from_file(str(report.out_dir / "tokenizer.json"))
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    enc = tok.encode_batch(sst2_sentences())
    ids = torch.tensor([e.ids for e in enc])
    mask = torch.tensor([e.attention_mask for e in enc])
    types = torch.tensor([e.type_ids for e in enc])
    lengths = mask.sum(1)
    assert lengths.min() < lengths.max() - 10  # really mixed lengths, really padded

    ours = load_model(report.out_dir)
    theirs = tf.BertModel.from_pretrained(minilm_dir).eval()
    with torch.no_grad():
        b = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        a = ours(ids, mask, types).last_hidden_state
        ours.set_attention_impl("eager")  # the explicit-softmax path that ONNX export traces
        c = ours(ids, mask, types).last_hidden_state
    real = mask.bool()
    diff_real = float((a - b).abs()[real].max())
    diff_pad = float((a - b).abs()[~real].max())
    eager_real = float((c - b).abs()[real].max())
    print(f"MiniLM last_hidden_state max abs diff vs transformers: {diff_real:.3g} on "
          f"{int(real.sum())} tokens, {diff_pad:.3g} on {int((~real).sum())} padding positions; "
          f"eager attention: {eager_real:.3g} on tokens")
    assert float(b.abs().max()) > 1.0  # real activations, not zeros
    assert diff_real <= 1e-5
    assert diff_pad <= 1e-5
    assert eager_real <= 1e-5
