"""``export --vocab-from``: a domain vocabulary (issue #50, 4): kept pieces, renumbered tokenizer, same vectors
for texts of the corpus, more pieces (never an [UNK]) for words outside it (tiny seeded model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgebert.errors import ConfigError
from export_fixtures import SENTENCES, make_model_dir
from runtime_fixtures import SPECIALS, tiny_vocab

CORPUS = SENTENCES[:4]                          # words of the first four sentences only
OUTSIDE = "the director has a good heart and a fine mind"     # "director", "heart", "mind", ... not in CORPUS


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    from edgebert.exporters.vocab_prune import prune_vocabulary

    root = tmp_path_factory.mktemp("vocab")
    model = make_model_dir(root / "model", seed=3)
    corpus = root / "domain.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    pruned = prune_vocabulary(model, corpus, root / "pruned")
    return model, root / "pruned", corpus, pruned


def _tok(folder: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def test_kept_pieces_are_the_corpus_the_characters_and_the_specials(dirs):
    model, pruned_dir, _, pruned = dirs
    vocab = tiny_vocab()
    words = {w for s in CORPUS for w in s.split()}
    chars = [p for p in vocab if len(p) == 1 or (p.startswith("##") and len(p) == 3)]
    assert pruned.original == len(vocab) and pruned.special == len(SPECIALS) and pruned.characters == len(chars)
    assert pruned.kept == len(SPECIALS) + len(chars) + pruned.from_corpus < len(vocab)
    assert pruned.from_corpus == len([w for w in words if len(w) > 1 and w in vocab])   # "films": film ##s
    new_vocab = json.loads((pruned_dir / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(new_vocab) == pruned.kept and sorted(new_vocab.values()) == list(range(pruned.kept))
    assert [new_vocab[s] for s in SPECIALS] == list(range(len(SPECIALS)))     # order kept: [PAD] is still 0
    assert (pruned_dir / "vocab.txt").read_text().split("\n")[:3] == ["[PAD]", "[UNK]", "[CLS]"]
    cfg = json.loads((pruned_dir / "config.json").read_text())
    assert cfg["vocab_size"] == pruned.kept and cfg["pad_token_id"] == 0


def test_corpus_texts_tokenize_and_embed_as_before(dirs):
    import torch

    from edgebert.model import load_model

    model_dir, pruned_dir, _, _ = dirs
    old, new = _tok(model_dir), _tok(pruned_dir)
    a, b = old.encode_batch(CORPUS), new.encode_batch(CORPUS)
    assert [e.tokens for e in a] == [e.tokens for e in b]
    assert b[0].ids[0] == new.token_to_id("[CLS]") and b[0].ids[-1] == new.token_to_id("[SEP]")
    m_old, m_new = load_model(model_dir), load_model(pruned_dir)
    with torch.no_grad():
        for ea, eb in zip(a, b):
            ids_a, ids_b = torch.tensor([ea.ids]), torch.tensor([eb.ids])
            mask = torch.ones_like(ids_a)
            ha = m_old(ids_a, attention_mask=mask).last_hidden_state
            hb = m_new(ids_b, attention_mask=mask).last_hidden_state
            assert torch.allclose(ha, hb, atol=1e-6)


def test_words_outside_the_corpus_cost_more_pieces_never_an_unk(dirs):
    model_dir, pruned_dir, _, _ = dirs
    old, new = _tok(model_dir).encode(OUTSIDE), _tok(pruned_dir).encode(OUTSIDE)
    assert "[UNK]" not in old.tokens and "[UNK]" not in new.tokens
    assert len(new.tokens) > len(old.tokens)
    assert "director" in old.tokens and "director" not in new.tokens
    spelled = "".join(t[2:] if t.startswith("##") else " " + t for t in new.tokens[1:-1]).strip()
    assert spelled == OUTSIDE                                   # the same words, in shorter pieces


def test_export_with_vocab_from(dirs, tmp_path):
    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.runtime import EdgeSession

    model_dir, _, corpus, pruned = dirs
    full = export_bundle(ExportConfig(model_dir=model_dir, out_dir=tmp_path / "full", validation_batch_sizes=(1, 2),
                                      validation_seq_lens=(7, 16)))
    small = export_bundle(ExportConfig(model_dir=model_dir, out_dir=tmp_path / "small", vocab_from=corpus,
                                       validation_batch_sizes=(1, 2), validation_seq_lens=(7, 16)))
    manifest = json.loads((small.bundle_dir / "manifest.json").read_text())
    assert manifest["vocabulary"]["kept"] == pruned.kept and manifest["vocabulary"]["corpus"] == "domain.txt"
    assert manifest["source"]["model_dir"] == str(Path(model_dir).resolve())       # the folder the user named
    a = EdgeSession(full.bundle_dir, provider="cpu", precision="fp32").encode(CORPUS)
    b = EdgeSession(small.bundle_dir, provider="cpu", precision="fp32").encode(CORPUS)
    assert np.abs(a - b).max() < 1e-5
    saved = (tmp_path / "full/onnx/model.onnx").stat().st_size - (small.bundle_dir / "onnx/model.onnx").stat().st_size
    hidden = json.loads((model_dir / "config.json").read_text())["hidden_size"]
    assert abs(saved - (pruned.original - pruned.kept) * hidden * 4) < 2000       # fp32 rows dropped


def test_vocab_from_refuses_a_missing_corpus_and_fill_mask(dirs, tmp_path):
    from edgebert.exporters import ExportConfig

    model_dir, _, corpus, _ = dirs
    with pytest.raises(ConfigError, match="not found"):
        ExportConfig(model_dir=model_dir, out_dir=tmp_path / "b", vocab_from=tmp_path / "nope.txt")
    with pytest.raises(ConfigError, match="fill-mask"):
        ExportConfig(model_dir=model_dir, out_dir=tmp_path / "b", vocab_from=corpus, task="mlm")
