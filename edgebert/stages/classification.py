"""Training a classifier on a task's data, as fine-tuning and task distillation both do: length-grouped
batches, cross-entropy, dev figures at every evaluation (accuracy/F1; entity precision/recall/F1 for
a token task; SQuAD EM/F1 for a span task), and the best checkpoint (by dev accuracy; by entity F1 for
a token task, by F1 for a span task) kept as the output directory's model (``best_checkpoint.json``
says which step it is). A span task (``squad``) trains a ``BertForQuestionAnswering`` on token windows:
the loss is the mean of the start and end cross-entropies."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from edgebert.bundle.cross_encoder import ST_SETTINGS_NAME, settings_file
from edgebert.bundle.pooling import carry_pooling
from edgebert.data.task_data import TaskData, collate
from edgebert.data.tokenizer import SpecialIds, save_tokenizer
from edgebert.errors import CheckpointError
from edgebert.files.atomic import write_json, write_text
from edgebert.files.jsonfile import read_json_object
from edgebert.model import IGNORE_INDEX, load_model, save_model
from edgebert.stages.metrics import squad_metrics, task_metrics
from edgebert.training import LengthGroupedBatches, TrainingTask

BEST_FILE = "best_checkpoint.json"


class BestCheckpoint:
    """Remembers the weights of the best evaluation so far (by ``metric``, higher is better) and
    writes those, not the latest, as the output directory's model."""

    def __init__(self, metric: str = "accuracy"):
        self.metric = metric
        self.value: float | None = None
        self.step: int | None = None
        self.metrics: dict[str, float] = {}
        self.state: dict[str, torch.Tensor] | None = None

    def update(self, model: nn.Module, metrics: dict[str, float], step: int) -> bool:
        value = metrics.get(self.metric)
        if value is None or (self.value is not None and value <= self.value):
            return False
        self.value, self.step, self.metrics = float(value), step, dict(metrics)
        self.state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        return True

    def save(self, model: nn.Module, out_dir: Path) -> None:
        """Write the best weights (or ``model`` as it is, before any evaluation) + best_checkpoint.json."""
        if self.state is None:
            save_model(model, out_dir)
            return
        best = copy.deepcopy(model).cpu()
        best.load_state_dict(self.state)
        save_model(best, out_dir)
        write_json(out_dir / BEST_FILE, {"metric": self.metric, "value": self.value, "step": self.step,
                                         "metrics": self.metrics})

    def restore(self, out_dir: Path | None, model: nn.Module) -> None:
        """On resume: the best so far is what the committed checkpoint (``out_dir``) holds."""
        if out_dir is None:
            return
        path = out_dir / BEST_FILE
        if not path.is_file():
            return
        hint = "start a new run without --resume"
        info = read_json_object(path, "the best checkpoint's record", hint, CheckpointError)
        try:
            self.value, self.step, self.metrics = float(info["value"]), int(info["step"]), dict(info["metrics"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{path} does not hold the best checkpoint's value, step and metrics ({exc})",
                                  hint) from None
        best = load_model(out_dir, type(model).__name__)
        self.state = {k: v.detach().cpu().clone() for k, v in best.state_dict().items()}


class ClassificationTask(TrainingTask):
    """Cross-entropy on a sequence or token classifier; dev figures (``task_metrics``); best checkpoint
    kept by ``best_metric``: accuracy, or entity F1 for a token task. ``source_dir``: the model folder
    it starts from, whose sentence-transformers modules (pooling) every saved model keeps."""

    def __init__(self, model: nn.Module, tokenizer, data: TaskData, *, batch_size_hint: int,
                 seed: int, eval_batch_size: int = 64, max_seq_len: int = 128, source_dir: Path | None = None):
        self.model, self.tokenizer, self.data = model, tokenizer, data
        self.source_dir = source_dir
        self.pad_id = SpecialIds.of(tokenizer).pad
        self.eval_batch_size, self.max_seq_len = eval_batch_size, max_seq_len
        self.batch_size, self.seed = batch_size_hint, seed
        self.span_task = data.train.is_span_task
        self.rank_task = data.dev_groups is not None or data.stats is not None
        self.best_metric = ("mrr@10" if self.rank_task else
                            "f1" if data.train.is_token_task or self.span_task else "accuracy")
        self._encoded_groups: dict = {}
        self.best = BestCheckpoint(self.best_metric)
        self._sampler: LengthGroupedBatches | None = None

    def num_train_examples(self) -> int:
        return len(self.data.train)

    def describe_data(self) -> str:
        if self.span_task:     # SQuAD: a question's long context gives several windows
            questions = len(set(self.data.train.example_index.tolist()))
            return f"{questions} questions in {len(self.data.train)} windows"
        return f"{len(self.data.train)} training examples"

    def sampler(self, batch_size: int, seed: int) -> LengthGroupedBatches:
        self._sampler = LengthGroupedBatches(self.data.train.lengths, batch_size, seed)
        self.batch_size = batch_size
        return self._sampler

    @property
    def step(self) -> int:
        return self._sampler.position // self.batch_size if self._sampler else 0

    def make_batch(self, indices, keys):
        return collate(self.data.train, indices, self.pad_id)

    def loss(self, model, batch):
        out = model(**batch)
        with torch.no_grad():
            if self.span_task:   # share of windows whose start and end token are both right
                right = ((out.start_logits.argmax(-1) == batch["start_positions"])
                         & (out.end_logits.argmax(-1) == batch["end_positions"]))
                return out.loss, {"accuracy": right.float().mean()}
            labels = batch["labels"]
            if out.logits.shape[-1] == 1:      # one relevance logit: right when its sign is the label's
                return out.loss, {"accuracy": ((out.logits[:, 0] > 0).long() == labels.view(-1)).float().mean()}
            keep = labels != IGNORE_INDEX
            acc = (out.logits.argmax(-1)[keep] == labels[keep]).float().mean()
        return out.loss, {"accuracy": acc}

    def evaluate(self, model):
        if self.data.dev is None and not self.data.dev_groups:
            return {}
        metrics = self.dev_metrics(model)
        self.best.update(model, metrics, self.step)
        return metrics

    def dev_metrics(self, model: nn.Module) -> dict[str, float]:
        if self.rank_task:
            from edgebert.stages.rerank_metrics import rerank_metrics

            return rerank_metrics(model, self.tokenizer, self.data.dev_groups or {}, self.max_seq_len,
                                  self.eval_batch_size, self.pad_id, self._encoded_groups)
        if self.span_task:
            return squad_metrics(model, self.data.dev, self.data.dev_examples, self.eval_batch_size, self.pad_id)
        return task_metrics(model, self.data.dev, self.data.labels, self.eval_batch_size, self.pad_id)

    def save(self, out_dir: Path) -> None:
        self.best.save(self.model, out_dir)
        save_tokenizer(self.tokenizer, out_dir, model_max_length=self.max_seq_len)
        if self.rank_task:      # a sentence-transformers CrossEncoder: what export reads as a reranker
            write_json(out_dir / ST_SETTINGS_NAME, settings_file("sigmoid"))
        elif self.source_dir is not None:
            carry_pooling(self.source_dir, out_dir, self.model.config.hidden_size, write_text)
