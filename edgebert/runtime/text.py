"""Text -> padded int64 arrays, safe to call from many threads at once.

A ``tokenizers.Tokenizer`` keeps padding and truncation settings as mutable state on the object, and
a bundle's tokenizer.json may switch both on (all-MiniLM-L6-v2 ships fixed padding to 128). Changing
that state per call would race between threads, so it is switched off once at load and never touched
again: texts are encoded unpadded, over-long ones are truncated on their own ``Encoding`` objects, and
batches are padded in numpy to their own longest row (dynamic padding).

Token tagging needs more than ids: ``TextEncoder.pieces`` gives each text's sub-tokens without special
tokens, with their strings and character offsets into the original text (what the tokenizer reports:
accents, case and repeated spaces of the input are kept), and ``frame`` puts the special tokens around
any slice of them (one window of a long text). Both build new objects per call; the shared tokenizer is
only read.

A tokenizer.json the model cannot use is a ``BundleError`` when the encoder is made, not an untyped
error at the first text: one that cannot encode a word outside its vocabulary (a WordLevel model
without its ``[UNK]``), or (``check_ids``) one whose ids, special tokens included, run past the model's
embedding table. Any later failure of the tokenizer on a text is a ``BundleError`` too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from edgebert.errors import BundleError, DataError
from edgebert.records import record

Text = str
Pair = tuple[str, str]


@record
class Encoded:
    """One tokenized input: ids and segment ids, with special tokens, unpadded."""

    ids: np.ndarray        # (T,) int64
    type_ids: np.ndarray   # (T,) int64
    truncated: bool = False

    def __len__(self) -> int:
        return int(self.ids.shape[0])


@record
class Pieces:
    """One text's sub-tokens, no special tokens: ids, token strings, and ``offsets[i] = (start, end)``
    character offsets of token i in the original text."""

    ids: np.ndarray            # (T,) int64
    tokens: tuple[str, ...]
    offsets: np.ndarray        # (T, 2) int64

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def check_texts(texts: Any, *, allow_pairs: bool = False, what: str = "texts") -> tuple[list, bool]:
    """Validate caller input; a single str (or pair) is a batch of one. Returns (items, is_pair).

    Rules (documented in the runtime README): a list may be empty; an empty string is a valid text
    (it encodes to ``[CLS] [SEP]``); anything that is not a str is a ``DataError`` naming its index.
    """
    if isinstance(texts, str):
        return [check_text(texts, what)], False
    if allow_pairs and isinstance(texts, tuple) and len(texts) == 2 and all(isinstance(t, str) for t in texts):
        return [tuple(check_text(t, what) for t in texts)], True
    if isinstance(texts, (bytes, bytearray)):
        raise DataError(f"{what} is bytes, expected str or a list of str", "decode it first (text.decode('utf-8'))")
    if isinstance(texts, dict) or not hasattr(texts, "__iter__"):
        raise DataError(f"{what} is a {type(texts).__name__}, expected a str or a list of str")
    items = list(texts)
    if not items:
        return [], False
    pairs = allow_pairs and isinstance(items[0], (tuple, list))
    for i, item in enumerate(items):
        if pairs:
            if not (isinstance(item, (tuple, list)) and len(item) == 2
                    and all(isinstance(t, str) for t in item)):
                raise DataError(f"{what}[{i}] is {_describe(item)}, expected a (str, str) pair",
                                "pass all single texts or all pairs, not a mix")
        elif isinstance(item, (tuple, list)):
            raise DataError(f"{what}[{i}] is a {type(item).__name__} (a text pair?), expected str",
                            "text pairs are only accepted by classify()")
        for text in (item if pairs else (item,)):
            check_text(text, f"{what}[{i}]")
    return ([tuple(p) for p in items] if pairs else items), pairs


def check_text(text: Any, what: str) -> str:
    """``text`` if it is a str the tokenizer can take; else a ``DataError`` naming ``what``: not a str, or
    a lone surrogate (half a UTF-16 pair, or a byte that was not UTF-8 and that Python kept as
    ``\\udc80``..``\\udcff``, as it does in command-line arguments), which the tokenizer refuses with a
    raw ``TypeError``. Every text entry point of the runtime checks its texts here."""
    if not isinstance(text, str):
        raise DataError(f"{what} is {_describe(text)}, expected str", "convert it to str first")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        byte = f"; the byte 0x{code - 0xDC00:02x}, which is not UTF-8" if 0xDC80 <= code <= 0xDCFF else ""
        raise DataError(f"{what} holds an invalid character {text[exc.start]!r} at position {exc.start} "
                        f"(a lone surrogate{byte})", "pass UTF-8 text; decode bytes with errors='replace'") from None
    return text


def _describe(item: Any) -> str:
    return "None" if item is None else f"a {type(item).__name__}"


class TextEncoder:
    """Tokenizes texts or text pairs for one bundle; thread-safe once constructed."""

    def __init__(self, tokenizer_file: str | Path, max_length: int, pad_id: int = 0):
        from tokenizers import Tokenizer

        self.file = Path(tokenizer_file)
        try:
            tok = Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # tokenizers raises a bare Exception for bad JSON
            raise BundleError(f"{tokenizer_file} is not a readable tokenizer.json ({_one_line(exc)})",
                              "re-export the bundle") from exc
        tok.no_padding()      # once, before the object is shared: see module docstring
        tok.no_truncation()
        self.tokenizer = tok
        self.max_length = int(max_length)
        self.pad_id = int(pad_id)
        self._specials = {False: tok.num_special_tokens_to_add(False), True: tok.num_special_tokens_to_add(True)}
        if self.max_length <= self._specials[True]:
            raise DataError(f"max_length={self.max_length} leaves no room for text")
        # a word no vocabulary has: a tokenizer that cannot encode one (no [UNK]) fails here, not later
        self._encode_batch(["\ue000edgebert\ue000"], True)
        # the special tokens a single text is framed with (BERT: [CLS] ... [SEP]), read once
        probe = self._encode_batch(["a"], True)[0]
        content = [i for i, special in enumerate(probe.special_tokens_mask) if not special]
        if not content:
            raise BundleError(f"{self.file} encodes the text 'a' to special tokens only", "re-export the bundle")
        first, last = content[0], content[-1] + 1
        self._frame = (np.asarray(probe.ids[:first], np.int64), np.asarray(probe.ids[last:], np.int64),
                       np.asarray(probe.type_ids[:first], np.int64), np.asarray(probe.type_ids[last:], np.int64),
                       int(probe.type_ids[first]))
        self.unk_id = tok.token_to_id(getattr(tok.model, "unk_token", None) or "[UNK]")
        # WordPiece "##" (BPE: its prefix, if any): tells a word's later sub-tokens from its first
        self.subword_prefix = getattr(tok.model, "continuing_subword_prefix", None) or None

    def _encode_batch(self, items: Sequence[Text | Pair], add_special_tokens: bool) -> list:
        """``tokenizer.encode_batch``; its untyped errors (a broken tokenizer.json) as ``BundleError``."""
        try:
            return self.tokenizer.encode_batch(list(items), add_special_tokens=add_special_tokens)
        except Exception as exc:  # noqa: BLE001  (tokenizers raises bare Exceptions)
            raise BundleError(f"{self.file} cannot encode text ({_one_line(exc)})",
                              "the bundle's tokenizer.json is broken; re-export the bundle") from exc

    def check_ids(self, vocab_size: int, special_ids: dict[str, int | None], max_id: int | None = None) -> None:
        """``BundleError`` unless every id this tokenizer can give (its vocabulary, added tokens and the
        special tokens its post-processor frames texts with) is below ``vocab_size`` (the rows of the
        model's embedding table), and every id of ``special_ids`` (the manifest's ``pad_id`` ...) is a
        token of this tokenizer."""
        framing = [int(i) for part in self._frame[:2] for i in part]
        if max_id is not None:      # recorded at export for this very (hash-checked) file: no vocabulary walk
            highest = max([max_id, *framing])
        else:
            highest = max([*self.tokenizer.get_vocab(with_added_tokens=True).values(), *framing], default=-1)
        if highest >= vocab_size:
            token = self.tokenizer.id_to_token(highest)
            raise BundleError(f"{self.file} gives token ids up to {highest} ({token!r}), but the model's embedding "
                              f"table holds {vocab_size} (ids 0..{vocab_size - 1})",
                              "the tokenizer and the graph come from different models; re-export the bundle")
        for name, value in special_ids.items():
            if value is not None and self.tokenizer.id_to_token(int(value)) is None:
                raise BundleError(f"the manifest's tokenizer.{name} is {value}, a token id {self.file.name} does "
                                  "not have", "the manifest and the tokenizer come from different exports; "
                                              "re-export the bundle")

    @property
    def prefix_length(self) -> int:
        """Special tokens before a single text's content ([CLS]: 1)."""
        return int(len(self._frame[0]))

    @property
    def content_length(self) -> int:
        """Sub-tokens of text that fit in one input of ``max_length`` beside the special tokens."""
        return self.max_length - self._specials[False]

    def pieces(self, items: Sequence[Text]) -> list[Pieces]:
        """Each text's sub-tokens (no specials, never truncated), token strings and character offsets."""
        if not items:
            return []
        out = []
        for enc in self._encode_batch(items, False):
            offsets = np.asarray(enc.offsets, np.int64).reshape(-1, 2)
            out.append(Pieces(np.asarray(enc.ids, np.int64), tuple(enc.tokens), offsets))
        return out

    def frame(self, ids: np.ndarray) -> Encoded:
        """Special tokens around a slice of a text's sub-token ids, as a single text gets them."""
        head, tail, head_types, tail_types, content_type = self._frame
        return Encoded(np.concatenate([head, np.asarray(ids, np.int64), tail]),
                       np.concatenate([head_types, np.full(len(ids), content_type, np.int64), tail_types]))

    def decode_tokens(self, tokens: Sequence[str]) -> str:
        """Sub-token strings back to text with the tokenizer's decoder (WordPiece: ``##`` pieces joined),
        as Hugging Face's ``convert_tokens_to_string`` does."""
        decoder = self.tokenizer.decoder
        return decoder.decode(list(tokens)) if decoder is not None else " ".join(tokens)

    def with_max_length(self, max_length: int) -> "TextEncoder":
        """A copy with another token limit, sharing the (read-only) tokenizer."""
        copy = object.__new__(TextEncoder)
        copy.__dict__.update(self.__dict__)
        copy.max_length = int(max_length)
        return copy

    def token(self, token_id: int) -> str:
        return self.tokenizer.id_to_token(int(token_id)) or f"<{token_id}>"

    def encode(self, items: Sequence[Text | Pair], pairs: bool = False, truncate: bool = True) -> list[Encoded]:
        """Encode with special tokens; over-long inputs are truncated (longest-first for pairs) or,
        with ``truncate=False``, rejected with a ``DataError`` naming the input and its length."""
        if not items:
            return []
        batch = self._encode_batch(items, True)
        out = []
        for i, enc in enumerate(batch):
            if len(enc.ids) > self.max_length:
                if not truncate:
                    raise DataError(f"input {i} is {len(enc.ids)} tokens, longer than max_length="
                                    f"{self.max_length}", "shorten it, or use truncate=True")
                enc = self._truncated(items[i], pairs)
                out.append(Encoded(np.asarray(enc.ids, np.int64), np.asarray(enc.type_ids, np.int64), True))
            else:
                out.append(Encoded(np.asarray(enc.ids, np.int64), np.asarray(enc.type_ids, np.int64)))
        return out

    def _truncated(self, item: Text | Pair, pairs: bool):
        """Re-encode one input without specials, cut it to fit, then add the specials back."""
        budget = self.max_length - self._specials[pairs]
        if not pairs:
            first = self.tokenizer.encode(item, add_special_tokens=False)
            first.truncate(budget)
            return self.tokenizer.post_process(first, None, add_special_tokens=True)
        first = self.tokenizer.encode(item[0], add_special_tokens=False)
        second = self.tokenizer.encode(item[1], add_special_tokens=False)
        len_a, len_b = longest_first(len(first.ids), len(second.ids), budget)
        first.truncate(len_a)
        second.truncate(len_b)
        return self.tokenizer.post_process(first, second, add_special_tokens=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def longest_first(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Lengths after removing tokens one at a time from the longer sequence (HF ``longest_first``)."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def pad_batch(rows: Sequence[Encoded], pad_id: int = 0, length: int | None = None) -> dict[str, np.ndarray]:
    """Right-pad to the longest row (or to ``length``): input_ids, attention_mask, token_type_ids."""
    longest = max(len(r) for r in rows)
    width = longest if length is None else max(length, longest)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        n = len(row)
        ids[i, :n] = row.ids
        mask[i, :n] = 1
        types[i, :n] = row.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def length_sorted_batches(rows: Sequence[Encoded], batch_size: int, max_tokens: int = 0) -> Iterator[np.ndarray]:
    """Indices of ``rows`` in batches of similar length (longest first), so padding stays small: at most
    ``batch_size`` rows, and with ``max_tokens`` at most that many padded tokens (rows x the batch's longest row;
    a row longer than ``max_tokens`` goes alone). The cap keeps the long rows of a mixed corpus in small batches,
    where a fixed batch size pads them to the longest one (attention's cost grows with the square of it).

    Callers scatter each batch's results back to these indices, restoring the input order.
    """
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    start = 0
    while start < len(order):
        size = batch_size
        if max_tokens:
            size = max(1, min(batch_size, max_tokens // max(len(rows[order[start]]), 1)))
        yield np.asarray(order[start:start + size], dtype=np.int64)
        start += size
