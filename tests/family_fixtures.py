"""Tiny seeded DistilBERT / RoBERTa / XLM-RoBERTa checkpoints built by transformers from a config, with
tokenizers built locally (no downloads): a WordPiece vocabulary for DistilBERT, a byte-level BPE for RoBERTa
and a SentencePiece Unigram model for XLM-RoBERTa (its own kind: ``▁`` word starts, Metaspace), each trained
with the ``tokenizers`` library on a few sentences and saved as a transformers tokenizer folder
(``save_pretrained``: tokenizer.json + its config files)."""

from __future__ import annotations

from pathlib import Path

import torch

SENTENCES = [
    "Hello world, the movie is good.", "The film was bad and the ending was worse.",
    "Zoë lives in Zürich and works for Acme in Paris.", "Where does Zoë live? She lives in Zürich.",
    "The quick brown fox jumps over the lazy dog.", "Café prices rose by 3.5 percent in 2024.",
    "Marie Curie won the Nobel Prize in physics and chemistry.", "A question: who wrote the book?",
] * 4
FAMILIES = ("distilbert", "roberta", "xlm-roberta")
CLASS_PREFIX = {"distilbert": "DistilBert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta"}
HEADS = ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
         "ForMultipleChoice")
LABELS = {"ForSequenceClassification": {0: "NEGATIVE", 1: "POSITIVE"},
          "ForTokenClassification": {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}}


def hf_config(family: str, head: str = "Model", vocab_size: int = 400, layers: int = 2):
    import transformers

    labels = LABELS.get(head)
    extra = {"id2label": labels, "label2id": {v: k for k, v in labels.items()}} if labels else {}
    if family == "distilbert":
        return transformers.DistilBertConfig(vocab_size=vocab_size, dim=32, n_layers=layers, n_heads=4,
                                             hidden_dim=64, max_position_embeddings=64, dropout=0.0,
                                             attention_dropout=0.0, **extra)
    cls = transformers.RobertaConfig if family == "roberta" else transformers.XLMRobertaConfig
    return cls(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
               intermediate_size=64, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1,
               bos_token_id=0, eos_token_id=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **extra)


def hf_model(family: str, head: str = "Model", seed: int = 0, layers: int = 2):
    """A seeded transformers model; its weights perturbed off their init (LayerNorms, biases, padding rows
    not at 1/0) so parity tests see every parameter."""
    import transformers

    torch.manual_seed(seed)
    cls = getattr(transformers, CLASS_PREFIX[family] + head)
    model = cls(hf_config(family, head, layers=layers)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def save_tokenizer(family: str, out: Path) -> None:
    """A tokenizer folder for ``family``: WordPiece (DistilBERT), byte-level BPE (RoBERTa), Unigram (XLM-R)."""
    import transformers
    from tokenizers import ByteLevelBPETokenizer, Tokenizer, models, normalizers, pre_tokenizers, processors

    out.mkdir(parents=True, exist_ok=True)
    if family == "distilbert":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=False)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        from tokenizers.trainers import WordPieceTrainer

        tok.train_from_iterator(SENTENCES, WordPieceTrainer(vocab_size=300, special_tokens=specials))
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
        fast = transformers.DistilBertTokenizerFast(tokenizer_object=tok, do_lower_case=False)
    elif family == "xlm-roberta":      # as XLM-R's own tokenizer.json: Unigram, Metaspace, <s> A </s></s> B </s>
        from tokenizers import SentencePieceUnigramTokenizer

        unigram = SentencePieceUnigramTokenizer()
        unigram.train_from_iterator(SENTENCES, vocab_size=300, unk_token="<unk>",
                                    special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        tok = unigram._tokenizer
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
        fast = transformers.XLMRobertaTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                                    sep_token="</s>", cls_token="<s>", unk_token="<unk>",
                                                    pad_token="<pad>", mask_token="<mask>")
    else:
        bpe = ByteLevelBPETokenizer(add_prefix_space=False, trim_offsets=True)
        bpe.train_from_iterator(SENTENCES, vocab_size=300, min_frequency=1,
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        tok = bpe._tokenizer
        tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                          ("<s>", tok.token_to_id("<s>")), trim_offsets=True,
                                                          add_prefix_space=False)
        fast = transformers.RobertaTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                                 sep_token="</s>", cls_token="<s>", unk_token="<unk>",
                                                 pad_token="<pad>", mask_token="<mask>")
    fast.save_pretrained(str(out))


def hf_dir(tmp_path: Path, family: str, head: str = "Model", seed: int = 0, layers: int = 2) -> tuple[Path, object]:
    """(folder, model): a transformers ``save_pretrained`` folder with the family's tokenizer."""
    model = hf_model(family, head, seed, layers)
    out = tmp_path / f"{family}-{head}"
    model.save_pretrained(str(out))
    save_tokenizer(family, out)
    return out, model


def hf_outputs(model, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' outputs under edgebert's output names (``import_hf.output_tensors``)."""
    feeds = {k: v for k, v in batch.items() if k != "token_type_ids"}
    with torch.no_grad():
        out = model(**feeds)
    names = {"last_hidden_state": "last_hidden_state", "pooler_output": "pooler_output", "logits": "logits",
             "start_logits": "start_logits", "end_logits": "end_logits"}
    return {ours: getattr(out, theirs) for ours, theirs in names.items()
            if isinstance(getattr(out, theirs, None), torch.Tensor)}
