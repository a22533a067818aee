"""Toy data and tiny seeded model directories for the fine-tuning, distillation and evaluation tests.

Not a test module (pytest collects ``test_*.py`` only). The toy sentiment task is trivially
separable: a sentence is positive iff it contains one of ``POSITIVE``, negative iff one of ``NEGATIVE``.
"""

from __future__ import annotations

import random
from pathlib import Path

POSITIVE = ("good", "great", "lovely", "superb", "fine")
NEGATIVE = ("bad", "awful", "poor", "dull", "boring")
FILLERS = ("the", "film", "movie", "was", "plot", "actor", "story", "a", "very", "really", "and", "it",
           "is", "with", "scene", "music", "long", "short", "old", "new")


def toy_sentence(rng: random.Random, label: int) -> str:
    words = [rng.choice(FILLERS) for _ in range(rng.randint(3, 9))]
    words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
    return " ".join(words)


def write_toy_tsv(path: Path, n: int, seed: int = 0, pair: bool = False) -> Path:
    """sentence<TAB>label (or sentence1<TAB>sentence2<TAB>label: label from the second sentence)."""
    rng = random.Random(seed)
    rows = ["sentence1\tsentence2\tlabel" if pair else "sentence\tlabel"]
    for _ in range(n):
        label = rng.randint(0, 1)
        if pair:
            neutral = " ".join(rng.choice(FILLERS) for _ in range(4))
            rows.append(f"{neutral}\t{toy_sentence(rng, label)}\t{label}")
        else:
            rows.append(f"{toy_sentence(rng, label)}\t{label}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


PEOPLE = (("anna", "smith"), ("bob", "jones"), ("carl",), ("dora", "lee"))
PLACES = (("paris",), ("new", "york"), ("rome",), ("oslo",))


def toy_ner_sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    """Filler words with a person (B-PER I-PER) and/or a place (B-LOC [I-LOC]) put in at random."""
    words = [rng.choice(FILLERS) for _ in range(rng.randint(3, 8))]
    tags = ["O"] * len(words)
    for kind, names in (("PER", PEOPLE), ("LOC", PLACES)):
        if rng.random() < 0.7:
            name, at = rng.choice(names), rng.randint(0, len(words))
            words[at:at] = list(name)
            tags[at:at] = [f"B-{kind}"] + [f"I-{kind}"] * (len(name) - 1)
    return words, tags


def write_toy_ner(path: Path, n: int, seed: int = 0, columns: int = 2) -> Path:
    """A CoNLL NER file in IOB2: ``TOKEN TAG`` per line as the shared CoNLL-2003 copy (``columns=4``:
    ``TOKEN POS CHUNK TAG``, the original layout), a blank line between sentences."""
    rng = random.Random(seed)
    blocks = []
    for _ in range(n):
        words, tags = toy_ner_sentence(rng)
        middle = " NN I-NP" if columns == 4 else ""
        blocks.append("\n".join(f"{w}{middle} {t}" for w, t in zip(words, tags)))
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


def write_toy_corpus(path: Path, paragraphs: int = 80, seed: int = 0) -> Path:
    """Plain text: blank-line separated paragraphs of a few toy sentences each."""
    rng = random.Random(seed)
    paras = []
    for _ in range(paragraphs):
        sents = [toy_sentence(rng, rng.randint(0, 1)).capitalize() + "." for _ in range(rng.randint(3, 6))]
        paras.append(" ".join(sents))
    path.write_text("\n\n".join(paras) + "\n", encoding="utf-8")
    return path


def toy_tokenizer():
    from edgebert.data.tokenizer import train_tokenizer

    rng = random.Random(1)
    texts = [toy_sentence(rng, i % 2) for i in range(300)]
    return train_tokenizer(texts, vocab_size=200, min_frequency=1)


def make_model_dir(out_dir: Path, architecture: str = "BertForPreTraining", layers: int = 2, seed: int = 0,
                   id2label: dict[int, str] | None = None, hidden: int = 64, dropout: float = 0.0,
                   max_position: int = 64) -> Path:
    """A tiny seeded BERT (+ the toy tokenizer) saved as an edgebert model directory."""
    import torch

    from edgebert.data.tokenizer import save_tokenizer
    from edgebert.model import BertConfig, build_model, save_model

    tok = toy_tokenizer()
    cfg = BertConfig.preset("tiny", vocab_size=tok.get_vocab_size(), num_hidden_layers=layers,
                            hidden_size=hidden, intermediate_size=2 * hidden, max_position_embeddings=max_position,
                            hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, id2label=id2label)
    torch.manual_seed(seed)
    model = build_model(cfg, architecture).eval()
    save_model(model, out_dir)
    save_tokenizer(tok, out_dir, model_max_length=max_position)
    return out_dir


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``edgebert.cli.main([...])`` -> (exit code, stdout, stderr)."""
    from edgebert.cli import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0, err
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


