"""``export --vocab-from CORPUS``: a domain bundle whose word table keeps only the word pieces a corpus uses.
On a 4-layer MiniLM student the table is 60% of the bytes.

What is kept, in the original id order (so ``[PAD]`` stays 0 and the special tokens keep their order):

* every special / added token of the tokenizer;
* every single-character piece and its ``##`` continuation: WordPiece can then still spell any word it
  could spell before, so **no text gains an ``[UNK]``** it did not have;
* every piece the original tokenizer produces on the corpus (one text per line).

The tokenizer is rewritten with the new ids (``model.vocab``, the added tokens, the post-processor's
special-token ids, the padding id) and so is ``vocab.txt``; the word table (and an MLM head's output bias)
keeps the same rows. A text made only of kept pieces tokenizes exactly as before (same pieces, same
vectors). **A text outside the corpus changes**: a word whose piece was dropped is spelled with shorter
kept pieces (greedy longest match, at worst single characters), so it costs more tokens and reads
differently; ``prune_vocabulary`` measures both on a sample when it is given one (``benchmarks`` report
them on held-out text). The checkpoint is written to a new folder; the original is not touched.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from edgebert.errors import ConfigError, DataError
from edgebert.files.atomic import atomic_path, write_text
from edgebert.files.textfiles import read_utf8
from edgebert.model import CONFIG_NAME, BertConfig
from edgebert.model.checkpoint import WEIGHTS_NAME, read_state_dict

TOKENIZER_NAME = "tokenizer.json"
VOCAB_TXT = "vocab.txt"
ROW_KEYS = ("word_embeddings.weight", "predictions.bias", "lm_head.bias")   # tensors with one row per token
SKIPPED = {WEIGHTS_NAME, "pytorch_model.bin", CONFIG_NAME, TOKENIZER_NAME, VOCAB_TXT}


@dataclass(frozen=True)
class VocabPrune:
    """What ``--vocab-from`` did (the manifest's ``vocabulary`` entry)."""
    corpus: str
    corpus_lines: int
    kept: int
    original: int
    from_corpus: int
    characters: int
    special: int

    def as_dict(self) -> dict:
        return {**asdict(self), "rule": "pieces the corpus uses + every single character and its ## form + the "
                "special tokens; ids renumbered in the original order"}


def kept_ids(tokenizer_json: Path, corpus: Path) -> tuple[list[int], dict[str, int]]:
    """The token ids to keep (sorted) and how many each rule kept."""
    from tokenizers import Tokenizer

    spec = json.loads(read_utf8(tokenizer_json))
    model = spec.get("model", {})
    if model.get("type") != "WordPiece":
        raise ConfigError(f"--vocab-from needs a WordPiece tokenizer; {tokenizer_json} is {model.get('type')!r}",
                          "drop --vocab-from for this model")
    vocab: dict[str, int] = model["vocab"]
    prefix = model.get("continuing_subword_prefix", "##")
    lines = [line for line in read_utf8(corpus).splitlines() if line.strip()]
    if not lines:
        raise DataError(f"--vocab-from corpus {corpus} has no text", "give a file with one text per line")
    special = {t["id"] for t in spec.get("added_tokens", [])}
    chars = {i for piece, i in vocab.items() if len(piece) == 1 or (piece.startswith(prefix)
                                                                     and len(piece) == len(prefix) + 1)}
    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.no_truncation()
    tok.no_padding()
    used: set[int] = set()
    for start in range(0, len(lines), 1000):
        for enc in tok.encode_batch(lines[start:start + 1000], add_special_tokens=False):
            used.update(enc.ids)
    keep = sorted(special | chars | used)
    return keep, {"corpus_lines": len(lines), "from_corpus": len(used - special - chars), "characters": len(chars),
                  "special": len(special)}


def pruned_tokenizer(spec: dict, keep: list[int]) -> dict:
    """``spec`` (tokenizer.json as a dict) with only ``keep`` ids, renumbered in order."""
    new_id = {old: new for new, old in enumerate(keep)}
    out = json.loads(json.dumps(spec))
    out["model"]["vocab"] = {p: new_id[i] for p, i in spec["model"]["vocab"].items() if i in new_id}
    for token in out.get("added_tokens", []):
        token["id"] = new_id[token["id"]]
    post = out.get("post_processor") or {}
    for processor in [post, *post.get("processors", [])]:
        for special in (processor.get("special_tokens") or {}).values():
            special["ids"] = [new_id[i] for i in special["ids"]]
        for key in ("cls", "sep"):                        # BertProcessing: [token, id]
            if isinstance(processor.get(key), list):
                processor[key] = [processor[key][0], new_id[processor[key][1]]]
    if out.get("padding"):
        out["padding"]["pad_id"] = new_id[out["padding"]["pad_id"]]
    return out


def prune_vocabulary(model_dir: Path, corpus: Path, out_dir: Path) -> VocabPrune:
    """Write ``model_dir`` with the vocabulary ``corpus`` needs into ``out_dir`` (see the module docstring)."""
    import torch
    from safetensors.torch import save_file

    model_dir, corpus, out_dir = Path(model_dir), Path(corpus), Path(out_dir)
    if not corpus.is_file():
        raise DataError(f"--vocab-from corpus {corpus} not found", "give a text file, one text per line")
    tok_file = model_dir / TOKENIZER_NAME
    keep, counts = kept_ids(tok_file, corpus)
    cfg = BertConfig.load(model_dir / CONFIG_NAME)
    spec = json.loads(read_utf8(tok_file))
    original = len(spec["model"]["vocab"])
    if cfg.vocab_size != original:
        raise ConfigError(f"the model has {cfg.vocab_size} word rows, its tokenizer {original} pieces",
                          "--vocab-from needs a tokenizer with one piece per row of the word table")
    index = torch.tensor(keep, dtype=torch.long)
    weights = {k: (v.index_select(0, index).contiguous() if k.endswith(ROW_KEYS) and v.shape[0] == original else v)
               for k, v in read_state_dict(model_dir).items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in model_dir.iterdir():                       # pooling, sentence-transformers files, tokenizer config
        if item.name not in SKIPPED:
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, out_dir / item.name)
    with atomic_path(out_dir / WEIGHTS_NAME) as tmp:
        save_file(weights, str(tmp), metadata={"format": "pt"})
    pad = keep.index(cfg.pad_token_id) if cfg.pad_token_id in keep else cfg.pad_token_id
    cfg.replace(vocab_size=len(keep), pad_token_id=pad).save(out_dir / CONFIG_NAME)
    new = pruned_tokenizer(spec, keep)
    write_text(out_dir / TOKENIZER_NAME, json.dumps(new, ensure_ascii=False))
    pieces = sorted(new["model"]["vocab"], key=new["model"]["vocab"].get)
    write_text(out_dir / VOCAB_TXT, "\n".join(pieces) + "\n")
    return VocabPrune(corpus=corpus.name, kept=len(keep), original=original, **counts)
