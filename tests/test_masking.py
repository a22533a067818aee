"""Pretraining examples (sentence pairs, NSP) and dynamic MLM masking, checked statistically."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgebert.data.corpus import builtin_corpus
from edgebert.data.mlm import (
    IGNORE_INDEX,
    MaskingCollator,
    PretrainingExamples,
    create_examples,
    most_frequent_token,
    regroup_documents,
    split_sentences,
    tokenize_documents,
)
from edgebert.data.tokenizer import SpecialIds, train_tokenizer
from edgebert.errors import ConfigError, DataError

IDS = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
VOCAB = 1000


def random_examples(n: int, seed: int = 0) -> PretrainingExamples:
    """[CLS] A [SEP] B [SEP] of random ordinary tokens, lengths 10..128."""
    rng = np.random.default_rng(seed)
    seqs, b_start = [], []
    for _ in range(n):
        la, lb = rng.integers(3, 62, size=2)
        a, b = rng.integers(5, VOCAB, size=la), rng.integers(5, VOCAB, size=lb)
        seqs.append(np.concatenate([[IDS.cls], a, [IDS.sep], b, [IDS.sep]]).astype(np.int32))
        b_start.append(la + 2)
    return PretrainingExamples(seqs, np.array(b_start), rng.integers(0, 2, size=n))


def test_masking_proportions_over_100k_tokens():
    examples = random_examples(2000)
    collator = MaskingCollator(IDS, VOCAB, seed=7)
    batch = collator(examples, range(len(examples)), range(len(examples)))
    original = torch.zeros_like(batch["input_ids"])
    for row, seq in enumerate(examples.input_ids):
        original[row, :len(seq)] = torch.from_numpy(seq.astype(np.int64))
    ordinary = (original >= 5)
    n_ordinary = int(ordinary.sum())
    assert n_ordinary >= 100_000
    chosen = batch["labels"] != IGNORE_INDEX
    assert abs(chosen.sum().item() / n_ordinary - 0.15) < 0.01
    # labels hold the original token wherever a position was chosen
    assert torch.equal(batch["labels"][chosen], original[chosen])
    masked = chosen & (batch["input_ids"] == IDS.mask)
    kept = chosen & (batch["input_ids"] == original)
    replaced = chosen & ~masked & ~kept
    n = chosen.sum().item()
    assert abs(masked.sum().item() / n - 0.8) < 0.01
    assert abs(replaced.sum().item() / n - 0.1) < 0.01
    # a random replacement equals the original token 1/995 of the time: "kept" is 10% + ~0.01%
    assert abs(kept.sum().item() / n - 0.1) < 0.01
    # random replacements are ordinary tokens, never special ones
    assert batch["input_ids"][replaced].min().item() >= 5
    # nothing outside the chosen positions changes
    assert torch.equal(batch["input_ids"][~chosen], original[~chosen])


def test_special_and_padding_tokens_are_never_chosen():
    examples = random_examples(500, seed=1)
    collator = MaskingCollator(IDS, VOCAB, seed=3)
    batch = collator(examples, range(500), range(500))
    special = (batch["input_ids"] == IDS.cls) | (batch["input_ids"] == IDS.sep) | \
              (batch["attention_mask"] == 0)
    assert special.sum() > 1500
    assert (batch["labels"][special] == IGNORE_INDEX).all()
    assert (batch["input_ids"][batch["attention_mask"] == 0] == IDS.pad).all()
    assert (batch["input_ids"][:, 0] == IDS.cls).all()
    # every example has at least one prediction target
    assert ((batch["labels"] != IGNORE_INDEX).sum(dim=1) >= 1).all()


def test_dynamic_padding_type_ids_and_determinism():
    examples = random_examples(16, seed=2)
    collator = MaskingCollator(IDS, VOCAB, seed=0)
    picks = [3, 7, 11]
    batch = collator(examples, picks, [100, 101, 102])
    lengths = [len(examples.input_ids[i]) for i in picks]
    assert batch["input_ids"].shape == (3, max(lengths))
    assert batch["attention_mask"].sum(dim=1).tolist() == lengths
    for row, i in enumerate(picks):
        types = batch["token_type_ids"][row, :lengths[row]]
        assert types[:examples.b_start[i]].sum() == 0 and (types[examples.b_start[i]:] == 1).all()
    assert batch["next_sentence_label"].tolist() == examples.next_sentence_label[picks].tolist()
    again = collator(examples, picks, [100, 101, 102])
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    other = collator(examples, picks, [200, 201, 202])
    assert not torch.equal(batch["labels"], other["labels"])
    # the masking of an example depends on its key only, not on its batch-mates
    alone = collator(examples, [7], [101])
    assert torch.equal(alone["labels"][0], batch["labels"][1, :lengths[1]])


def test_collator_validates():
    with pytest.raises(ConfigError):
        MaskingCollator(IDS, VOCAB, mlm_probability=0.0)
    with pytest.raises(ConfigError):
        MaskingCollator(IDS, VOCAB, mask_ratio=0.9, random_ratio=0.2)


def test_split_sentences():
    text = "Dr. Smith arrived. He said hi! Did it work? Yes (it did). 3 cats.\nNew paragraph"
    assert split_sentences(text) == ["Dr.", "Smith arrived.", "He said hi!", "Did it work?",
                                     "Yes (it did).", "3 cats.", "New paragraph"]
    assert split_sentences("H. americanus is a lobster .") == ["H. americanus is a lobster ."]


# ---------------------------------------------------------------------------- sentence pairs
@pytest.fixture(scope="module")
def docs_and_tokenizer():
    docs = builtin_corpus()[:80]
    return docs, train_tokenizer(docs, vocab_size=2000, min_frequency=2)


def test_pairs_layout_nsp_balance_and_lengths(docs_and_tokenizer):
    docs, tok = docs_and_tokenizer
    ids = SpecialIds.of(tok)
    tokenized = tokenize_documents(docs, tok, max_segment_tokens=61)
    ex = create_examples(tokenized, ids, max_seq_len=64, seed=1, dupe_factor=2)
    assert len(ex) > 1000
    lengths = np.array([len(s) for s in ex.input_ids])
    assert lengths.max() <= 64 and lengths.min() >= 5
    assert np.mean(lengths) > 45  # packed close to the target length (10% short by design)
    for seq, b in zip(ex.input_ids, ex.b_start):
        assert seq[0] == ids.cls and seq[b - 1] == ids.sep and seq[-1] == ids.sep
        assert not np.isin(seq[1:b - 1], ids.all).any() and not np.isin(seq[b:-1], ids.all).any()
    random_share = ex.next_sentence_label.mean()
    assert abs(random_share - 0.5) < 0.04, random_share
    again = create_examples(tokenized, ids, max_seq_len=64, seed=1, dupe_factor=2)
    assert ex.fingerprint() == again.fingerprint()
    assert create_examples(tokenized, ids, max_seq_len=64, seed=2).fingerprint() != ex.fingerprint()


def test_true_next_segments_continue_the_document():
    """Sentences are numbered tokens: a true pair has B starting right after A ends."""
    docs = [[[100 * d + 10 * s + k for k in range(3)] for s in range(8)] for d in range(1, 9)]
    ex = create_examples(docs, IDS, max_seq_len=16, seed=0, dupe_factor=4, short_seq_prob=0.0)
    checked = 0
    for seq, b, label in zip(ex.input_ids, ex.b_start, ex.next_sentence_label):
        a_tokens, b_tokens = seq[1:b - 1], seq[b:-1]
        same_doc = a_tokens[0] // 100 == b_tokens[0] // 100
        if label == 0:
            assert same_doc
            if a_tokens[-1] % 10 == 2 and b_tokens[0] % 10 == 0:  # A, B not truncated at the seam
                assert b_tokens[0] == a_tokens[-1] + 8  # next sentence of the same document
                checked += 1
        else:
            assert not same_doc
    assert checked > 10


def test_too_small_and_regrouping():
    with pytest.raises(DataError, match="too small"):
        create_examples([[[7]]], IDS, max_seq_len=16)
    one_doc = [" ".join(f"Sentence number {i} is here." for i in range(40))]
    regrouped = regroup_documents(one_doc)
    assert len(regrouped) >= 4
    assert split_sentences(" ".join(regrouped)) == split_sentences(one_doc[0])


def test_unigram_baseline_token():
    ex = PretrainingExamples([np.array([2, 9, 9, 8, 3, 9, 3], dtype=np.int32)], np.array([5]), np.array([0]))
    assert most_frequent_token(ex, IDS) == (9, 0.75)
