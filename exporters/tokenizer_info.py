"""What a runtime must know about a bundle's tokenizer.json (lowercasing, special token ids)."""

from __future__ import annotations

from pathlib import Path

from edgebert.errors import CheckpointError
from edgebert.files.jsonfile import loads

TOKENIZER_NAME = "tokenizer.json"


def find_tokenizer(model_dir: str | Path) -> Path:
    path = Path(model_dir) / TOKENIZER_NAME
    if not path.is_file():
        raise CheckpointError(f"{model_dir} has no {TOKENIZER_NAME}",
                              "a bundle needs the model's tokenizer: save one next to config.json")
    return path


def _lowercase(normalizer: dict | None) -> bool:
    if not normalizer:
        return False
    kind = normalizer.get("type")
    if kind == "BertNormalizer":
        return bool(normalizer.get("lowercase", True))
    if kind == "Lowercase":
        return True
    if kind == "Sequence":
        return any(_lowercase(n) for n in normalizer.get("normalizers", []))
    return False


# WordPiece (BERT, DistilBERT) and byte-level BPE / SentencePiece (RoBERTa, XLM-RoBERTa) spellings
SPECIAL_TOKENS = {"pad": ("[PAD]", "<pad>"), "cls": ("[CLS]", "<s>"), "sep": ("[SEP]", "</s>"),
                  "mask": ("[MASK]", "<mask>"), "unk": ("[UNK]", "<unk>")}


def _special_id(tok, name: str) -> int | None:
    return next((i for i in map(tok.token_to_id, SPECIAL_TOKENS[name]) if i is not None), None)


def tokenizer_metadata(path: str | Path) -> dict:
    """``{"file", "lowercase", "pad_id", "cls_id", "sep_id", "mask_id", "unk_id", "vocab_size"}``."""
    from tokenizers import Tokenizer

    path = Path(path)
    try:
        spec = loads(path.read_bytes())
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # json or tokenizers errors: the file is unusable either way
        raise CheckpointError(f"{path} is not a readable tokenizer.json ({' '.join(str(exc).split())})",
                              "re-save the tokenizer") from exc
    padding = spec.get("padding") or {}
    pad_id = _special_id(tok, "pad")
    if pad_id is None:
        pad_id = padding.get("pad_id", 0)
    ids = {f"{name}_id": _special_id(tok, name) for name in ("cls", "sep", "mask", "unk")}
    if ids["cls_id"] is None or ids["sep_id"] is None:
        raise CheckpointError(f"{path} has no [CLS]/[SEP] (or <s>/</s>) tokens", "a BERT-family tokenizer is needed")
    return {"file": TOKENIZER_NAME, "lowercase": _lowercase(spec.get("normalizer")), "pad_id": pad_id,
            **ids, "vocab_size": tok.get_vocab_size(with_added_tokens=True)}


def highest_token_id(path: str | Path) -> int:
    """The highest id the tokenizer at ``path`` can give: its vocabulary, added tokens and the special
    tokens it frames a text with."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    return max([*tok.get_vocab(with_added_tokens=True).values(), *tok.encode("a").ids])
