"""The bundle tasks: what each one means, in one place (stdlib only, importable by the runtime).

A bundle's ``task`` (manifest.json) says which head its graph has. One ``BundleTask`` entry per task
holds everything the other layers need to know about it: the architectures it is exported from, the
graph's outputs, the INT8 gate's (and ``edgebert check``'s) metric and default budget, the
``EdgeSession`` method that serves it, and what a model folder carries for it beside the weights.
Export, quantization, runtime, check and bench read these entries (``bundle_task(name)``); adding a
task is one entry here plus the code of its head, metric and method.

Not to be confused with the *dataset presets* of fine-tuning and evaluation (``sst2``, ``ner``,
``squad`` ...: ``edgebert.data.tasks.DATASET_PRESETS``), which say how to read a dataset.
"""

from __future__ import annotations

from edgebert.errors import ConfigError
from edgebert.records import record

__all__ = ["BundleTask", "BUNDLE_TASKS", "TASK_NAMES", "bundle_task", "task_of_architecture", "task_serving",
           "INPUT_KINDS", "CARRIED", "check_budget", "reranker_of"]

INPUT_KINDS = ("texts", "questions", "choices", "pairs")   # pairs: (query, passage)
CARRIED = ("pooling", "labels")      # what a model folder may carry for a task beside its weights


@record
class BundleTask:
    """One bundle task. Shapes are symbolic: ``batch``, ``sequence``, ``choices`` axes and the model's
    ``hidden_size`` / ``vocab_size`` / ``num_labels`` (``edgebert.bundle.io_spec`` fills them in)."""

    name: str                                   # the manifest's "task"
    architecture: str                           # the edgebert class the task is exported as
    architectures: tuple[str, ...]              # config.json "architectures" exported as this task by default
    outputs: tuple[tuple[str, tuple[str, ...]], ...]   # (output name, symbolic shape), in graph order
    metric: str                                 # the INT8 gate's and check's metric (edgebert.runtime.fidelity)
    metric_output: str                          # the output the metric and batch invariance compare
    budget: float                               # default loss budget in the metric's units (1 - mean)
    budget_why: str                             # the reason for that budget, in a line
    method: str                                 # the EdgeSession method that serves the task
    inputs: str = "texts"                       # texts | questions ((question, context) pairs) | choices
    carries: tuple[str, ...] = ()               # pooling (sentence-transformers modules), labels (id2label)
    token_level: bool = False                   # one prediction per token: the metric counts tokens
    gate_may_miss: bool = False                 # an INT8 graph over budget ships flagged, fp32 the default
    optional_outputs: tuple[str, ...] = ()      # outputs a bundle may leave out (embed: the pooler head)
    # a sentence-transformers CrossEncoder's score activation (``bundle.cross_encoder``; ``EdgeSession.predict``):
    # "always" (every bundle of the task has one), "stated" (where the model's folder states a CrossEncoder), ""
    cross_encoder: str = ""
    one_label: bool = False                     # the head has exactly one output class (a relevance logit)

    def __post_init__(self) -> None:
        if self.inputs not in INPUT_KINDS:
            raise ValueError(f"task {self.name}: inputs {self.inputs!r} not one of {INPUT_KINDS}")
        if not set(self.carries) <= set(CARRIED):
            raise ValueError(f"task {self.name}: carries {self.carries} beyond {CARRIED}")
        if self.metric_output not in self.output_names:
            raise ValueError(f"task {self.name}: metric output {self.metric_output!r} is not an output")
        if not set(self.optional_outputs) <= set(self.output_names) - {self.metric_output}:
            raise ValueError(f"task {self.name}: optional outputs {self.optional_outputs} must be other outputs")
        if self.cross_encoder not in ("", "stated", "always"):
            raise ValueError(f"task {self.name}: cross_encoder {self.cross_encoder!r} not '', 'stated' or 'always'")
        if not 0.0 <= self.budget < 1.0:
            raise ValueError(f"task {self.name}: budget {self.budget} not in [0, 1)")

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.outputs)

    @property
    def required_outputs(self) -> tuple[str, ...]:
        """The outputs every bundle of the task declares (``output_names`` less the optional ones)."""
        return tuple(n for n in self.output_names if n not in self.optional_outputs)

    def bundle_outputs(self, pooling_stated: bool) -> tuple[str, ...]:
        """The outputs an export declares: an embedding model that states its sentence-transformers pooling
        (mean / cls / max over the token vectors) ships without the pooler head, which that pooling never
        reads (sentence-transformers itself never runs it); any other keeps every output."""
        return self.required_outputs if pooling_stated and self.has_pooling else self.output_names

    @property
    def metric_shape(self) -> tuple[str, ...]:
        """The symbolic shape of the output the metric compares."""
        return dict(self.outputs)[self.metric_output]

    @property
    def input_axes(self) -> tuple[str, ...]:
        return ("batch", "choices", "sequence") if self.inputs == "choices" else ("batch", "sequence")

    @property
    def has_labels(self) -> bool:
        """The model's ``id2label`` names its outputs' classes (written to the manifest)."""
        return "labels" in self.carries

    @property
    def outputs_vocabulary(self) -> bool:
        """An output has one entry per vocabulary piece (fill-mask logits): ``export --vocab-from`` would change
        what it means."""
        return any("vocab_size" in shape for _, shape in self.outputs)

    @property
    def has_pooling(self) -> bool:
        """The model's sentence pooling (sentence-transformers modules) travels with it."""
        return "pooling" in self.carries

    def as_dict(self) -> dict:
        return {"name": self.name, "architecture": self.architecture, "architectures": list(self.architectures),
                "outputs": {n: list(s) for n, s in self.outputs}, "metric": self.metric,
                "metric_output": self.metric_output, "budget": self.budget, "method": self.method,
                "inputs": self.inputs, "carries": list(self.carries), "token_level": self.token_level,
                "gate_may_miss": self.gate_may_miss, "optional_outputs": list(self.optional_outputs),
                "cross_encoder": self.cross_encoder, "one_label": self.one_label}


_TEXT = ("batch", "sequence")
BUNDLE_TASKS: tuple[BundleTask, ...] = (
    BundleTask("embed", "BertModel", ("BertModel", "BertForPreTraining"),
               (("last_hidden_state", (*_TEXT, "hidden_size")), ("pooler_output", ("batch", "hidden_size"))),
               "cosine", "last_hidden_state", 0.005,
               "a mean cosine of 0.995 keeps nearest-neighbour rankings", "embed", carries=("pooling",),
               optional_outputs=("pooler_output",)),
    BundleTask("mlm", "BertForMaskedLM", ("BertForMaskedLM",), (("logits", (*_TEXT, "vocab_size")),),
               "top1_agreement", "logits", 0.02,
               "top-1 among near-ties flips more easily than a sentence label; 2 tokens in 100",
               "fill_mask", token_level=True),
    BundleTask("cls", "BertForSequenceClassification", ("BertForSequenceClassification",),
               (("logits", ("batch", "num_labels")),), "label_agreement", "logits", 0.01,
               "at most 1 in 100 classifications may flip", "classify", carries=("labels",), cross_encoder="stated"),
    BundleTask("token-cls", "BertForTokenClassification", ("BertForTokenClassification",),
               (("logits", (*_TEXT, "num_labels")),), "token_label_agreement", "logits", 0.005,
               "one flipped token can split, cut or invent an entity (CoNLL: ~1 entity per 8 words): "
               "1 in 200 real tokens", "tag", carries=("labels",), token_level=True),
    BundleTask("qa", "BertForQuestionAnswering", ("BertForQuestionAnswering",),
               (("start_logits", _TEXT), ("end_logits", _TEXT)), "answer_overlap_f1", "start_logits", 0.02,
               "a flipped answer costs 1/n (0.23 points on the 439 built-in questions the gate measures), a boundary "
               "moved by a word a fraction of that", "answer", inputs="questions", gate_may_miss=True),
    BundleTask("multiple-choice", "BertForMultipleChoice", ("BertForMultipleChoice",),
               (("logits", ("batch", "choices")),), "label_agreement", "logits", 0.01,
               "the chosen choice flips at most 1 in 100 times, as a sentence label", "run", inputs="choices"),
    # a cross-encoder reranker (sentence-transformers' CrossEncoder with one label): imported from a folder that
    # states a CrossEncoder (``bundle.cross_encoder``), never by architecture alone (that is a ``cls``)
    BundleTask("rerank", "BertForSequenceClassification", (), (("logits", ("batch", "num_labels")),),
               "ranking", "logits", 0.005,
               "each query's candidates kept in fp32's order: NDCG@10 against it (the best weighing most) loses at "
               "most 0.005, i.e. at most ~4 queries in 100 with their best two swapped",
               "rank", inputs="pairs", carries=("labels",), cross_encoder="always", one_label=True),
)
_BY_NAME = {t.name: t for t in BUNDLE_TASKS}
TASK_NAMES: tuple[str, ...] = tuple(_BY_NAME)


def check_budget(value: object) -> float | None:
    """``value`` as an INT8 accuracy budget (``--max-accuracy-loss``, in the task metric's loss units): None
    (the task's own ``budget``) or a number from 0 up to, not including, 1; ``ConfigError`` for anything
    else (negative, NaN, 1 or more, not a number). The one rule of ``export``, ``pipeline`` and ``check``."""
    if value is None:
        return None
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= float(value) < 1.0):
        raise ConfigError(f"max accuracy loss {value!r} must be in [0, 1)", "e.g. 0.005 = at most 0.5 points")
    return float(value)


def bundle_task(name: str) -> BundleTask:
    """The entry of task ``name``; ``ConfigError`` naming the known ones for any other."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown task {name!r}", f"use one of {', '.join(TASK_NAMES)}") from None


def task_of_architecture(architecture: str) -> BundleTask | None:
    """The task an edgebert architecture (``BertFor...``) exports as by default; None for one edgebert
    cannot export (a model family's own names are translated by ``edgebert.model.families`` first)."""
    return next((t for t in BUNDLE_TASKS if architecture in t.architectures), None)


def reranker_of(architecture: str) -> BundleTask | None:
    """The task a one-label ``architecture`` exports as when its folder states a CrossEncoder (a reranker), if any."""
    return next((t for t in BUNDLE_TASKS if t.cross_encoder == "always" and t.architecture == architecture), None)


def task_serving(method: str) -> BundleTask:
    """The task whose bundles ``EdgeSession.<method>`` serves."""
    found = next((t for t in BUNDLE_TASKS if t.method == method), None)
    if found is None:
        raise ValueError(f"no bundle task is served by {method}()")
    return found
