"""Distil a BERT teacher into a shallower student (DistilBERT style), on the shared training engine.

Three modes, one ``DistillConfig`` (``config.py``):

- **MLM (general) distillation** (``task="mlm"``): the teacher is any BERT with a masked-LM head
  (``BertForPreTraining`` or ``BertForMaskedLM``). Text is cut into the same sentence-pair examples
  as pretraining and masked dynamically. The loss is ``alpha_kd * KL(student/T || teacher/T) * T^2``
  on the masked-token logits + ``alpha_mlm * MLM cross-entropy`` + ``alpha_cos * (1 - cos)`` of the
  last hidden states over non-padding tokens, plus the optional TinyBERT terms ``alpha_hidden``
  (hidden-state MSE per mapped layer, embeddings included) and ``alpha_attn`` (attention KL).
- **Embedding distillation** (``task="embed"``): the teacher is any BERT encoder, e.g. the
  sentence-embedding model all-MiniLM-L6-v2 (no MLM head). Single texts (paragraphs of the corpus);
  the loss is on hidden states only: cosine, and optionally hidden MSE and attention KL. Evaluation
  compares mean-pooled sentence embeddings of student and teacher on held-out text.
- **Task distillation** (``task="sst2"|"mrpc"|"tsv"``): the teacher is a fine-tuned
  ``BertForSequenceClassification``; the loss is ``alpha_kd * KD(logits)`` + ``alpha_ce *`` hard-label
  cross-entropy (+ the optional terms); dev accuracy/F1 are reported next to the teacher's, and the
  best student (by dev accuracy) is kept. ``task="ner"``: a fine-tuned ``BertForTokenClassification``;
  KD per token (``KL(teacher_T || student_T) * T^2`` averaged over every real sub-token) + hard-label
  CE on each word's first sub-token; dev entity F1 (seqeval) next to the teacher's, best kept by it.
  ``task="squad"``: a fine-tuned ``BertForQuestionAnswering``; KD of the start and end distributions
  over each window's tokens + hard start/end CE; dev EM / F1 next to the teacher's, best kept by F1.

A narrower student (``hidden``): its weights sliced from the teacher's (``edgebert.model.narrow``); in the text
modes the hidden-vector terms go through a learned ``HiddenProjection`` (``projection.py``) that is never saved
with it; a task student (``--task``) learns the teacher's logits only (hidden-state terms are refused).

``losses.py`` holds the loss terms, ``tasks.py`` one training task per mode, ``stage.py`` the run.
"""

from edgebert.stages.distill.config import DISTILL_PRESETS, DISTILL_TASKS, DistillConfig, build_distill_config  # noqa: F401
from edgebert.stages.distill.stage import DistillResult, build_student, distill, load_teacher  # noqa: F401
from edgebert.stages.distill.tasks import EmbeddingDistillationTask, MlmDistillationTask, TaskDistillationTask  # noqa: F401
