"""What each distillation mode trains on, as a ``TrainingTask``: the student is optimised, the teacher
runs in eval mode under ``no_grad`` (and is never saved in checkpoints)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from edgebert.bundle.pooling import carry_pooling
from edgebert.data.mlm import MaskingCollator
from edgebert.data.task_data import EncodedDataset, TaskData, collate, eval_batches
from edgebert.data.tokenizer import SpecialIds, save_tokenizer
from edgebert.files.atomic import write_text
from edgebert.model import IGNORE_INDEX, masked_positions_logits, save_model
from edgebert.model.bert import MASK_VALUE
from edgebert.stages.classification import ClassificationTask
from edgebert.stages.distill.config import DistillConfig
from edgebert.stages.distill.losses import ModelOutputs, distillation_loss, hard_label_loss
from edgebert.stages.distill.projection import HiddenProjection, StudentWithProjection
from edgebert.stages.metrics import embedding_agreement, mean_pool, mlm_metrics, sentence_embeddings
from edgebert.training import LengthGroupedBatches, TrainingTask

INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class _DistillationTask(TrainingTask):
    """The student/teacher pair; the model files saved are the student's, with the teacher's tokenizer
    and sentence-transformers modules (its pooling: the student stands in for the teacher)."""

    def __init__(self, student: nn.Module, teacher: nn.Module | None, tokenizer, cfg: DistillConfig,
                 layer_map: list[int]):
        self.student, self.teacher, self.tokenizer = student, teacher, tokenizer
        self.model: nn.Module = student
        self.cfg, self.layer_map = cfg, layer_map
        self.pad_id = SpecialIds.of(tokenizer).pad
        self.teacher_metrics: dict[str, float] | None = None
        # a narrower student: its hidden states reach the teacher's width through a learned projection,
        # optimised with it (a part of ``self.model``), never saved with it
        widths = (student.config.hidden_size, teacher.config.hidden_size) if teacher is not None else (0, 0)
        self.projection = HiddenProjection(*widths) if widths[0] != widths[1] else None

    def with_projection(self, model: nn.Module) -> nn.Module:
        """``model`` and the projection as the one module the engine optimises (``model`` alone if none)."""
        return model if self.projection is None else StudentWithProjection(model, self.projection)

    @property
    def encoder_kwargs(self) -> dict[str, bool]:
        return dict(output_hidden_states=self.cfg.needs_hidden_states, output_attentions=self.cfg.needs_attentions)

    def to_device(self, device: torch.device) -> None:
        self.model.to(device)
        if self.teacher is not None:
            self.teacher.to(device)

    def save(self, out_dir: Path) -> None:
        save_model(self.student, out_dir)
        save_tokenizer(self.tokenizer, out_dir, model_max_length=self.cfg.max_seq_len)
        carry_pooling(self.cfg.teacher, out_dir, self.student.config.hidden_size, write_text)


# =========================================================================== MLM distillation
class StudentMLM(nn.Module):
    """What the engine optimises in MLM distillation: the student, with its vocabulary projection
    run only at masked positions (the (B, T, V) logits would dominate CPU time)."""

    def __init__(self, student: nn.Module):
        super().__init__()
        self.student = student

    def forward(self, input_ids, attention_mask, token_type_ids, labels, output_hidden_states=False,
                output_attentions=False):
        return masked_positions_logits(self.student, input_ids, attention_mask, token_type_ids, labels,
                                       output_hidden_states=output_hidden_states,
                                       output_attentions=output_attentions)


class MlmDistillationTask(_DistillationTask):
    """Masked sentence-pair examples: KD on the masked-token logits + MLM + the hidden-state terms."""

    def __init__(self, student: nn.Module, teacher: nn.Module | None, tokenizer, train_examples, eval_batches_,
                 cfg: DistillConfig, layer_map: list[int]):
        super().__init__(student, teacher, tokenizer, cfg, layer_map)
        self.model = self.with_projection(StudentMLM(student))
        self.train_examples, self.eval_batches = train_examples, eval_batches_
        self.collator = MaskingCollator(SpecialIds.of(tokenizer), student.config.vocab_size,
                                        seed=cfg.train.seed, mlm_probability=cfg.mlm_probability,
                                        segment_types=student.config.type_vocab_size > 1)

    def num_train_examples(self) -> int:
        return len(self.train_examples)

    def make_batch(self, indices, keys):
        batch = self.collator(self.train_examples, indices, keys)
        batch.pop("next_sentence_label")
        return batch

    @property
    def needs_teacher(self) -> bool:
        """False for the MLM-only baseline: then the teacher is not run during training."""
        c = self.cfg
        return bool(c.alpha_kd or c.alpha_cos or c.alpha_hidden or c.alpha_attn)

    def loss(self, model, batch):
        s_enc, s_logits, targets = model(**batch, **self.encoder_kwargs)
        if not self.needs_teacher:
            loss = F.cross_entropy(s_logits.float(), targets)
            with torch.no_grad():
                acc = (s_logits.argmax(-1) == targets).float().mean()
            return self.cfg.alpha_mlm * loss, {"loss_mlm": loss.detach(), "mlm_accuracy": acc}
        with torch.no_grad():
            t_enc, t_logits, _ = masked_positions_logits(self.teacher, **batch, **self.encoder_kwargs)
        total, metrics = distillation_loss(self.cfg, ModelOutputs.of(s_enc, s_logits), ModelOutputs.of(t_enc, t_logits),
                                           batch["attention_mask"], targets, self.layer_map,
                                           projection=self.projection)
        with torch.no_grad():
            s_pred = s_logits.argmax(-1)
            metrics["mlm_accuracy"] = (s_pred == targets).float().mean()
            metrics["teacher_agreement"] = (s_pred == t_logits.argmax(-1)).float().mean()
        return total, metrics

    def evaluate(self, model):
        if not self.eval_batches:
            return {}
        if self.teacher_metrics is None:
            self.teacher_metrics = {f"teacher_{k}": v for k, v in mlm_metrics(self.teacher, self.eval_batches).items()
                                    if k != "masked_tokens"}
        return {**mlm_metrics(self.student, self.eval_batches), **self.teacher_metrics}


# =========================================================================== embedding distillation
class EmbeddingDistillationTask(_DistillationTask):
    """Single texts in length-grouped batches; the loss is on hidden states only (no head needed):
    cosine of the last hidden states over real tokens (+ hidden MSE / attention KL per mapped layer).
    Evaluation: how closely the student's mean-pooled sentence embeddings follow the teacher's on the
    held-out texts (cosine mean/min, nearest-neighbour agreement)."""

    def __init__(self, student: nn.Module, teacher: nn.Module, tokenizer, train: EncodedDataset,
                 held_out: EncodedDataset | None, cfg: DistillConfig, layer_map: list[int]):
        super().__init__(student, teacher, tokenizer, cfg, layer_map)
        self.train_data, self.held_out = train, held_out
        self.teacher_embeddings: torch.Tensor | None = None
        self.model = self.with_projection(student)

    def num_train_examples(self) -> int:
        return len(self.train_data)

    def sampler(self, batch_size: int, seed: int) -> LengthGroupedBatches:
        return LengthGroupedBatches(self.train_data.lengths, batch_size, seed)

    def make_batch(self, indices, keys):
        return collate(self.train_data, indices, self.pad_id, with_labels=False)

    def loss(self, model, batch):
        s = model(**batch, **self.encoder_kwargs)
        with torch.no_grad():
            t = self.teacher(**batch, **self.encoder_kwargs)
        total, metrics = distillation_loss(self.cfg, ModelOutputs.of(s), ModelOutputs.of(t),
                                           batch["attention_mask"], None, self.layer_map,
                                           projection=self.projection)
        with torch.no_grad():
            mask = batch["attention_mask"]
            s_last = s.last_hidden_state if self.projection is None else self.projection(s.last_hidden_state)
            cos = F.cosine_similarity(mean_pool(s_last.float(), mask),
                                      mean_pool(t.last_hidden_state.float(), mask), dim=-1)
            metrics["embedding_cosine"] = cos.mean()
        return total, metrics

    def evaluate(self, model):
        if self.held_out is None:
            return {}
        bs = self.cfg.eval_batch_size
        if self.teacher_embeddings is None:
            self.teacher_embeddings = sentence_embeddings(self.teacher, self.held_out, bs, self.pad_id)
        student = sentence_embeddings(getattr(model, "student", model), self.held_out, bs, self.pad_id)
        figures = embedding_agreement(student, self.teacher_embeddings) if self.projection is None \
            else self._narrow_agreement(student)
        return {("embedding_" + k if k.startswith("cosine") else k): v for k, v in figures.items()}


    @torch.no_grad()
    def _narrow_agreement(self, student: torch.Tensor) -> dict[str, float]:
        """A narrower student's figures: the cosines to the teacher's embeddings through the projection
        (mean pooling is linear, so pooling then projecting is projecting then pooling); the relational
        figures (similarity ranks, neighbours) on the student's own vectors, zero-padded to the teacher's
        width (padding keeps every norm and dot product)."""
        teacher = self.teacher_embeddings
        projected = self.projection(student.to(self.projection.proj.weight.device)).float().cpu()
        own = F.pad(student, (0, teacher.shape[1] - student.shape[1]))
        through = embedding_agreement(projected, teacher)
        return {**embedding_agreement(own, teacher), **{k: v for k, v in through.items() if k.startswith("cosine")}}


# =========================================================================== task distillation
def span_logits(out, attention_mask: torch.Tensor) -> torch.Tensor:
    """A span model's (B, 2, T) start/end logits with padding at MASK_VALUE (no probability there)."""
    return out.span_logits.masked_fill(attention_mask[:, None, :] == 0, MASK_VALUE)


class TaskDistillationTask(ClassificationTask):
    """Classifier -> classifier: KD on the logits (+ hard-label CE and the optional terms); the dev
    evaluation, length-grouped batches and best-checkpoint keeping are ``ClassificationTask``'s.

    A token classifier (``ner``) is distilled per token: KD over every real sub-token (not [CLS],
    [SEP] or padding), so the student also follows the teacher on the sub-tokens after a word's first
    (the ones ``EdgeSession.tag(aggregation="simple")`` groups); hard-label CE on the first sub-token
    of each word, where the gold tags are.

    A span model (``squad``) is distilled on its (B, 2, T) start/end logits: KD of the start and of the
    end distribution over each window's tokens (padding masked out), hard-label CE on the gold start
    and end positions (transformers' span loss, over the real tokens)."""

    def __init__(self, student: nn.Module, teacher: nn.Module, tokenizer, data: TaskData,
                 cfg: DistillConfig, layer_map: list[int]):
        super().__init__(student, tokenizer, data, batch_size_hint=cfg.train.batch_size, seed=cfg.train.seed,
                         eval_batch_size=cfg.eval_batch_size, max_seq_len=cfg.max_seq_len, source_dir=cfg.teacher)
        self.teacher, self.cfg, self.layer_map = teacher, cfg, layer_map
        self.teacher_metrics: dict[str, float] | None = None
        self.token_task = data.train.is_token_task
        self.span_task = data.train.is_span_task
        specials = SpecialIds.of(tokenizer)
        self.not_real = torch.tensor(sorted({specials.cls, specials.sep, specials.pad}))
        # the teacher's logits of the training set: (N, C), or one (T_i, C) per example (token task),
        # or one (2, T_i) per window (span task)
        self.logit_cache: torch.Tensor | list[torch.Tensor] | None = None
        self.logits_only = not (cfg.alpha_cos or cfg.alpha_hidden or cfg.alpha_attn)
        # hard labels only (the no-distillation baseline): the teacher is not run during training
        self.needs_teacher = bool(cfg.alpha_kd) or not self.logits_only

    def to_device(self, device: torch.device) -> None:
        self.model.to(device)
        self.teacher.to(device)
        if (self.cfg.cache_teacher_logits and self.needs_teacher and self.logits_only
                and self.logit_cache is None):
            self.logit_cache = self._teacher_logits(device)

    @torch.no_grad()
    def _teacher_logits(self, device: torch.device) -> torch.Tensor | list[torch.Tensor]:
        """The teacher's logits for every training example (eval mode: deterministic), in one pass
        over length-sorted batches: cheaper than recomputing them every epoch."""
        train = self.data.train
        per_example = self.token_task or self.span_task
        out: torch.Tensor | list = ([None] * len(train) if per_example
                                    else torch.zeros(len(train), len(self.data.labels)))
        for idx, batch in eval_batches(train, self.eval_batch_size, self.pad_id):
            inputs = {k: batch[k].to(device) for k in INPUT_KEYS}
            logits = self.logits_of(self.teacher(**inputs), inputs["attention_mask"]).float().cpu()
            if per_example:
                for row, i in enumerate(idx):
                    out[i] = logits[row, ..., :len(train.input_ids[i])].clone() if self.span_task \
                        else logits[row, :len(train.input_ids[i])].clone()
            else:
                out[torch.as_tensor(idx)] = logits
        return out

    def logits_of(self, out, attention_mask: torch.Tensor) -> torch.Tensor:
        """What the KD and CE terms compare: the classifier logits, or a span model's (B, 2, T) start/end
        logits with padding at MASK_VALUE (no probability there, for student and teacher alike)."""
        if not self.span_task:
            return out.logits
        return span_logits(out, attention_mask)

    def targets_of(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The hard labels: (B,) / (B, T) class ids, or (B, 2) start and end positions."""
        if self.span_task:
            return torch.stack([batch["start_positions"], batch["end_positions"]], dim=1)
        return batch["labels"]

    def _cached(self, indices, width: int) -> torch.Tensor:
        if self.span_task:
            out = torch.full((len(indices), 2, width), MASK_VALUE)
            for row, i in enumerate(indices):
                out[row, :, :self.logit_cache[i].shape[-1]] = self.logit_cache[i]
            return out
        if not self.token_task:
            return self.logit_cache[list(indices)]
        out = torch.zeros(len(indices), width, len(self.data.labels))
        for row, i in enumerate(indices):
            cached = self.logit_cache[i]
            out[row, :len(cached)] = cached
        return out

    def make_batch(self, indices, keys):
        batch = collate(self.data.train, indices, self.pad_id)
        if self.logit_cache is not None:
            batch["teacher_logits"] = self._cached(indices, batch["input_ids"].shape[1])
        return batch

    def real_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) True at the real sub-tokens: not [CLS], [SEP] or padding."""
        return ~torch.isin(input_ids, self.not_real.to(input_ids.device))

    def loss(self, model, batch):
        labels = self.targets_of(batch)
        inputs = {k: batch[k] for k in INPUT_KEYS}
        mask = inputs["attention_mask"]
        kwargs = dict(output_hidden_states=self.cfg.needs_hidden_states,
                      output_attentions=self.cfg.needs_attentions)
        positions = self.real_tokens(inputs["input_ids"]) if self.token_task else None
        labelled = labels != IGNORE_INDEX
        if "teacher_logits" in batch:
            t_out = ModelOutputs(batch["teacher_logits"], None)
        elif not self.needs_teacher:
            logits = self.logits_of(model(**inputs), mask)
            loss = hard_label_loss(logits, labels)
            with torch.no_grad():
                acc = (logits.argmax(-1)[labelled] == labels[labelled]).float().mean()
            return self.cfg.alpha_ce * loss, {"loss_ce": loss.detach(), "accuracy": acc}
        else:
            with torch.no_grad():
                t = self.teacher(**inputs, **kwargs)
            t_out = ModelOutputs.of(t.encoder, self.logits_of(t, mask))
        s = model(**inputs, **kwargs)
        s_logits = self.logits_of(s, mask)
        total, metrics = distillation_loss(self.cfg, ModelOutputs.of(s.encoder, s_logits), t_out,
                                           mask, labels, self.layer_map, positions)
        with torch.no_grad():
            one = s_logits.shape[-1] == 1          # a reranker: relevant when its logit is positive
            pred = (s_logits[..., 0] > 0).long() if one else s_logits.argmax(-1)
            agree = pred == ((t_out.logits[..., 0] > 0).long() if one else t_out.logits.argmax(-1))
            metrics["accuracy"] = (pred[labelled] == labels[labelled]).float().mean()
            metrics["teacher_agreement"] = (agree[positions] if positions is not None else agree).float().mean()
        return total, metrics

    def evaluate(self, model):
        metrics = super().evaluate(model)
        if not metrics:
            return metrics
        if self.teacher_metrics is None:
            m = self.dev_metrics(self.teacher)
            self.teacher_metrics = {f"teacher_{k}": float(m[k]) for k in
                                    ("accuracy", "f1", "precision", "recall", "exact_match", "mrr@10", "ndcg@10")
                                    if k in m}
        return {**metrics, **self.teacher_metrics}
