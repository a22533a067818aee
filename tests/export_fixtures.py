"""Tiny seeded BERT directories with a tiny WordPiece tokenizer.json, for the export and
quantization tests (not a test module)."""

from __future__ import annotations

import string
from pathlib import Path

WORDS = """the a an and or but not no is are was were be it this that film movie story good bad great
worst best funny dull boring charming moving love hate fun time one two very too more most plot
scene actor actors director script comedy drama music end beautiful terrible wonderful awful mess
heart mind of to in on at by for with from as""".split()
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SENTENCES = [
    "the film is a charming and moving comedy",
    "a dull , boring mess of a movie",
    "the actors are wonderful but the script is terrible",
    "one of the best films of the year",
    "i hate this movie , the plot is awful",
    "beautiful music and a great story",
    "too long and not funny",
    "the director has a good heart and a fine mind",
]


def tiny_vocab() -> list[str]:
    chars = list(string.ascii_lowercase + string.digits + ".,'!?-")
    vocab = SPECIALS + chars + [f"##{c}" for c in string.ascii_lowercase]
    return vocab + [w for w in dict.fromkeys(WORDS) if w not in vocab]


def make_tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {tok: i for i, tok in enumerate(tiny_vocab())}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(path))
    return path


def make_model_dir(out_dir: Path, architecture: str = "BertModel", seed: int = 0, **overrides) -> Path:
    """A seeded tiny BERT (hidden 64, 2 layers, 4 heads, 128 positions) + tokenizer.json."""
    import torch

    from edgebert.checkpoint import save_model
    from edgebert.config import BertConfig
    from edgebert.model import build_model

    labels = {"id2label": {0: "negative", 1: "positive"}} if architecture == "BertForSequenceClassification" else {}
    cfg = BertConfig.preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                            vocab_size=len(tiny_vocab()), **{**labels, **overrides})
    torch.manual_seed(seed)
    model = build_model(cfg, architecture).eval()
    out_dir = Path(out_dir)
    save_model(model, out_dir)
    make_tokenizer(out_dir / "tokenizer.json")
    return out_dir


def make_calib_text(path: Path, n: int = 48) -> Path:
    """A plain-text calibration file, one sentence per line (variations of SENTENCES)."""
    lines = [f"{SENTENCES[i % len(SENTENCES)]} {' '.join(WORDS[(i * 7) % len(WORDS): (i * 7) % len(WORDS) + i % 9])}"
             for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
