"""What a runtime must know about a bundle's tokenizer.json (lowercasing, special token ids)."""

from __future__ import annotations

import json
from pathlib import Path

from edgebert.errors import CheckpointError

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


def tokenizer_metadata(path: str | Path) -> dict:
    """``{"file", "lowercase", "pad_id", "cls_id", "sep_id", "mask_id", "unk_id", "vocab_size"}``."""
    from tokenizers import Tokenizer

    path = Path(path)
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # json or tokenizers errors: the file is unusable either way
        raise CheckpointError(f"{path} is not a readable tokenizer.json ({' '.join(str(exc).split())})",
                              "re-save the tokenizer") from exc
    padding = spec.get("padding") or {}
    pad_id = tok.token_to_id("[PAD]")
    if pad_id is None:
        pad_id = padding.get("pad_id", 0)
    ids = {name: tok.token_to_id(token) for name, token in
           (("cls_id", "[CLS]"), ("sep_id", "[SEP]"), ("mask_id", "[MASK]"), ("unk_id", "[UNK]"))}
    if ids["cls_id"] is None or ids["sep_id"] is None:
        raise CheckpointError(f"{path} has no [CLS]/[SEP] tokens", "a BERT tokenizer is needed")
    return {"file": TOKENIZER_NAME, "lowercase": _lowercase(spec.get("normalizer")), "pad_id": pad_id,
            **ids, "vocab_size": tok.get_vocab_size(with_added_tokens=True)}
