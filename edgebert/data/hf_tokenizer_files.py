"""What a Hugging Face model folder says about its tokenizer, and the fast tokenizer built from its files
where it ships none (``import-hf``): ``tokenizer_config.json``, RoBERTa's byte-level BPE from
``vocab.json`` + ``merges.txt``, ``do_lower_case``."""

from __future__ import annotations

from pathlib import Path

from edgebert.errors import CheckpointError
from edgebert.files.jsonfile import read_json_or_none

__all__ = ["tokenizer_config", "byte_level_bpe", "do_lower_case"]


def tokenizer_config(src: Path) -> dict:
    """tokenizer_config.json of a model folder as a dict ({} where it is missing or unreadable)."""
    config = read_json_or_none(src / "tokenizer_config.json")
    return config if isinstance(config, dict) else {}


def byte_level_bpe(folder: Path, config: dict):
    """RoBERTa's fast tokenizer from its vocab.json + merges.txt, as transformers converts it: byte-level
    BPE, <s> A </s></s> B </s>, offsets trimmed to the words (``add_prefix_space`` from tokenizer_config)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    prefix = bool(config.get("add_prefix_space", False))
    tok = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt"),
                                         continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, lstrip=t == "<mask>", normalized=False, special=True)
                for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>") if tok.token_to_id(t) is not None]
    tok.add_special_tokens(specials)
    cls_id, sep_id = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    if cls_id is None or sep_id is None:
        raise CheckpointError(f"{folder}/vocab.json has no <s> / </s>", "add the model's tokenizer.json")
    tok.post_processor = processors.RobertaProcessing(("</s>", sep_id), ("<s>", cls_id), trim_offsets=True,
                                                      add_prefix_space=prefix)
    return tok


def do_lower_case(src: Path) -> bool:
    """do_lower_case from the source tokenizer_config.json (default True, as bert-*-uncased)."""
    return bool(tokenizer_config(src).get("do_lower_case", True))
