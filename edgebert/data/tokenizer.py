"""WordPiece tokenizers: train one on a corpus, or load one from a model directory or a vocab.txt.

Built with the ``tokenizers`` library (BERT normalizer, BERT pre-tokenizer, WordPiece model and
decoder) plus a post-processor that produces ``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]`` with
type ids 0/1. A model directory holds ``tokenizer.json`` (what edgebert and the torch-free runtime
read), ``vocab.txt`` (what older BERT tooling reads), and ``tokenizer_config.json`` +
``special_tokens_map.json`` so ``transformers.BertTokenizerFast.from_pretrained(dir)`` works too.

Tokenizers returned here never pad or truncate (a loaded ``tokenizer.json`` may carry such settings,
e.g. MiniLM pads to 128): padding and truncation are decided by the caller.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece
from tokenizers.trainers import WordPieceTrainer

from edgebert.errors import CheckpointError, ConfigError, DataError
from edgebert.files.atomic import write_json, write_text
from edgebert.files.jsonfile import read_json_or_none

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)  # trained vocabularies start with these, so [PAD] = 0
ROBERTA_SPECIALS = ("<pad>", "<unk>", "<s>", "</s>", "<mask>")   # the same roles in RoBERTa's vocabularies
TOKENIZER_FILE, VOCAB_FILE = "tokenizer.json", "vocab.txt"
TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE = "tokenizer_config.json", "special_tokens_map.json"
TOKENIZER_OUTPUTS = (TOKENIZER_FILE, VOCAB_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE)  # save_tokenizer's


@dataclass(frozen=True)
class SpecialIds:
    """Ids of the five BERT special tokens in one vocabulary."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def of(cls, tok: Tokenizer) -> "SpecialIds":
        """BERT's ``[PAD]`` ... or, in a byte-level BPE / SentencePiece vocabulary (RoBERTa, XLM-RoBERTa),
        ``<pad>``, ``<unk>``, ``<s>``, ``</s>``, ``<mask>``."""
        ids = {}
        for name, token, other in zip(("pad", "unk", "cls", "sep", "mask"), SPECIAL_TOKENS, ROBERTA_SPECIALS):
            idx = tok.token_to_id(token)
            if idx is None:
                idx = tok.token_to_id(other)
            if idx is None:
                raise DataError(f"the vocabulary has no {token} token",
                                f"a BERT vocabulary needs {', '.join(SPECIAL_TOKENS)} "
                                f"(a RoBERTa one {', '.join(ROBERTA_SPECIALS)})")
            ids[name] = idx
        return cls(**ids)

    @property
    def all(self) -> tuple[int, ...]:
        return (self.pad, self.unk, self.cls, self.sep, self.mask)


def _bert_pipeline(tok: Tokenizer, lowercase: bool) -> Tokenizer:
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def _attach_post_processor(tok: Tokenizer) -> Tokenizer:
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)],
    )
    return tok


def _plain(tok: Tokenizer) -> Tokenizer:
    tok.no_padding()
    tok.no_truncation()
    return tok


def train_tokenizer(texts: Iterable[str], vocab_size: int = 8000, lowercase: bool = True,
                    min_frequency: int = 2) -> Tokenizer:
    """Train a BERT WordPiece tokenizer on ``texts``; [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4.

    Deterministic: the same texts give the same tokenizer.json and vocab.txt, byte for byte, in any
    process. ``tokenizers``' trainer gives the word-continuation pieces (``##e``) ids in the iteration
    order of a randomly seeded hash map, and breaks ties between equally frequent merges by those ids
    (huggingface/tokenizers#1794), so two runs could learn different vocabularies. Here those pieces
    are registered up front in code-point order (``continuation_pieces``), which fixes every id and
    so every tie; the registration is then dropped again (``_without_extra_specials``).

    The vocabulary may come out smaller than ``vocab_size`` on a small corpus.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 26:
        raise ConfigError(f"vocab_size={vocab_size} is too small", "use at least a few hundred")
    if min_frequency < 1:
        raise ConfigError(f"min_frequency={min_frequency} must be >= 1")
    texts = list(texts)
    tok = _bert_pipeline(Tokenizer(WordPiece(unk_token=UNK, max_input_chars_per_word=100)), lowercase)
    pieces = continuation_pieces(tok, texts)
    trainer = WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                               special_tokens=[*SPECIAL_TOKENS, *pieces], continuing_subword_prefix="##",
                               show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() <= len(SPECIAL_TOKENS) + len(pieces):
        raise DataError("the corpus has no text to train a tokenizer on")
    return _attach_post_processor(_without_extra_specials(tok, lowercase))


def continuation_pieces(tok: Tokenizer, texts: Iterable[str]) -> list[str]:
    """``##c`` for every character that follows another inside a word (after the tokenizer's
    normalizer and pre-tokenizer), in code-point order: the pieces the trainer would otherwise number
    in hash order."""
    inner: set[str] = set()
    for text in texts:
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text)):
            inner.update(word[1:])
    return [f"##{c}" for c in sorted(inner)]


def _without_extra_specials(trained: Tokenizer, lowercase: bool) -> Tokenizer:
    """The trained WordPiece vocabulary (ids unchanged) with only the five BERT specials as special
    tokens: the ``##c`` pieces registered for training must match like any other piece."""
    vocab = json.loads(trained.to_str())["model"]["vocab"]
    tok = _bert_pipeline(Tokenizer(WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=100)), lowercase)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def _read_vocab(vocab_txt: Path) -> dict[str, int]:
    if not vocab_txt.is_file():
        raise DataError(f"vocabulary {vocab_txt} not found", "pass a BERT vocab.txt")
    try:
        lines = vocab_txt.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"vocabulary {vocab_txt} is not UTF-8 ({exc.reason})") from exc
    vocab: dict[str, int] = {}
    for line in lines:
        token = line.rstrip("\r\n")
        if token and token not in vocab:
            vocab[token] = len(vocab)
    if not vocab:
        raise DataError(f"vocabulary {vocab_txt} is empty")
    return vocab


def load_vocab_tokenizer(vocab_txt: str | Path, lowercase: bool = True) -> Tokenizer:
    """A BERT tokenizer (normalizer, pre-tokenizer, post-processor) around an existing vocab.txt."""
    vocab = _read_vocab(Path(vocab_txt))
    tok = _bert_pipeline(Tokenizer(WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=100)),
                         lowercase)
    SpecialIds.of(tok)  # fail early with a clear message when a special token is missing
    return _attach_post_processor(tok)


def is_lowercase(tok: Tokenizer) -> bool:
    """Whether the tokenizer's normalizer lower-cases (read from its serialised form)."""
    norm = json.loads(tok.to_str()).get("normalizer") or {}
    stack = norm.get("normalizers", [norm])
    return any(n.get("type") == "Lowercase" or n.get("lowercase") for n in stack if n)


def save_tokenizer(tok: Tokenizer, out_dir: str | Path, model_max_length: int = 512) -> Path:
    """Write tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / TOKENIZER_FILE, tok.to_str())
    by_id = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    write_text(out_dir / VOCAB_FILE, "".join(f"{token}\n" for token, _ in by_id))
    specials = {"unk_token": UNK, "sep_token": SEP, "pad_token": PAD, "cls_token": CLS,
                "mask_token": MASK}
    write_json(out_dir / SPECIAL_TOKENS_MAP_FILE, specials)
    write_json(out_dir / TOKENIZER_CONFIG_FILE, {
        "tokenizer_class": "BertTokenizer", "do_lower_case": is_lowercase(tok),
        "tokenize_chinese_chars": True, "strip_accents": None,
        "model_max_length": model_max_length, **specials})
    return out_dir


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load from a model directory (tokenizer.json, else vocab.txt), a tokenizer.json or a vocab.txt."""
    path = Path(path)
    if path.is_dir():
        if (path / TOKENIZER_FILE).is_file():
            path = path / TOKENIZER_FILE
        elif (path / VOCAB_FILE).is_file():
            path = path / VOCAB_FILE
        else:
            raise CheckpointError(f"{path} has no {TOKENIZER_FILE} or {VOCAB_FILE}",
                                  "pass a model directory that includes its tokenizer")
    if not path.is_file():
        raise DataError(f"tokenizer {path} not found")
    if path.suffix == ".json":
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a plain Exception on bad JSON
            raise CheckpointError(f"{path} is not a readable tokenizer.json ({exc})") from exc
        SpecialIds.of(tok)
        if tok.post_processor is None:
            _attach_post_processor(tok)
        return _plain(tok)
    return load_vocab_tokenizer(path, lowercase=_config_lowercase(path.parent))


def _config_lowercase(model_dir: Path) -> bool:
    """do_lower_case from tokenizer_config.json beside a vocab.txt (default True, as bert-*-uncased)."""
    cfg = read_json_or_none(model_dir / TOKENIZER_CONFIG_FILE)
    return bool(cfg.get("do_lower_case", True)) if isinstance(cfg, dict) else True
