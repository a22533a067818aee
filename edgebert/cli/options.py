"""Every option that more than one command takes, declared once (``Annotated`` aliases, as the Hugging
Face CLI does): one flag name, one type and one meaning across ``pretrain``, ``finetune``, ``distill``,
``evaluate`` and ``pipeline`` (and ``bench``/``export`` where they share one). ``None`` means "the
recipe's value": a command passes what the user set and the library's config builder fills the rest.

``tests/test_cli_options.py`` walks the app and fails when one option gets two spellings.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Annotated, Any, Callable, List, Optional

import typer

from edgebert.bundle.task_registry import BUNDLE_TASKS

PIPELINE_INT8_BUDGET = 0.01     # PipelineConfig.max_accuracy_loss (tests/test_cli_help.py holds them equal)


def preset_option(names: str) -> Any:
    """``--preset``: the named recipe of a command (``names``: its choices, for the help)."""
    return Annotated[Optional[str], typer.Option("--preset", help=f"Recipe: {names}.")]


def task_option(names: str, required: bool = False) -> Any:
    """``--task``: what is trained or scored (``names``: the command's choices, for the help)."""
    if required:
        return Annotated[str, typer.Option("--task", help=names)]
    return Annotated[Optional[str], typer.Option("--task", help=names)]


# --------------------------------------------------------------------------- where things go
Out = Annotated[Path, typer.Option("--out", "-o", help="Output directory.")]
OutFile = Annotated[Path, typer.Option("--out", "-o", help="Output file.")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue the checkpoint in --out.")]
Overwrite = Annotated[bool, typer.Option(
    "--overwrite", help="Start again in an --out this command wrote before (its files only; a folder "
                        "holding anything else is refused).")]
Progress = Annotated[Optional[bool], typer.Option(
    "--progress/--no-progress", help="A progress bar on a terminal; --no-progress (and any output that is not a "
                                     "terminal): a plain log line per logging step and evaluation.")]
Json = Annotated[bool, typer.Option("--json/--no-json", help="Print the result as JSON (for scripts) instead of text.")]
ReportDir = Annotated[Optional[Path], typer.Option(
    "--out", "-o", help="Write report.json, report.md, latency.png and bench.jsonl into this directory.")]

# --------------------------------------------------------------------------- data
Corpus = Annotated[Optional[List[Path]], typer.Option(
    "--corpus", metavar="<path>",
    help="Training text (repeatable); default: the built-in corpus (Python's documentation).")]
EvalCorpus = Annotated[Optional[List[Path]], typer.Option(
    "--eval-corpus", metavar="<path>", help="Held-out text (repeatable); default: a held-out part of --corpus.")]
CorpusFormat = Annotated[Optional[str], typer.Option("--corpus-format", help="auto | text | wikitext.")]
TrainFile = Annotated[Optional[Path], typer.Option("--train", help="Training file (GLUE TSV; CoNLL for ner; "
                                                                   "SQuAD JSON for squad).")]
DevFile = Annotated[Optional[Path], typer.Option("--dev", help="Dev file: accuracy/F1 at every evaluation.")]
TagColumn = Annotated[Optional[int], typer.Option(
    "--tag-column", help="ner: the CoNLL column holding the tag, 1-based (default: the last column).")]
Retriever = Annotated[Optional[Path], typer.Option(
    "--retriever", metavar="DIR", help="rerank: the sentence-embedding model whose top passages are the hard "
                                       "negatives and the dev top-20 (default: the start model; distill: the "
                                       "teacher's).")]
DocStride = Annotated[Optional[int], typer.Option(
    "--doc-stride", help="squad: context tokens that consecutive windows of a long context share (default 128; "
                          "less for windows under 384 tokens).")]
AnswerDocStride = Annotated[Optional[int], typer.Option(
    "--doc-stride", help="Context tokens that consecutive windows of a long text share (default 128; less for "
                         "windows under 384 tokens).")]
MaxSeqLen = Annotated[Optional[int], typer.Option("--max-seq-len", help="Tokens per sequence, specials included.")]
MaxTrainExamples = Annotated[Optional[int], typer.Option(
    "--max-train-examples", help="Train on a seeded random subset of this many examples.")]
MaxEvalExamples = Annotated[Optional[int], typer.Option(
    "--max-eval-examples", help="Evaluate on at most this many examples.")]
FreezeWordEmbeddings = Annotated[Optional[bool], typer.Option(
    "--freeze-word-embeddings/--train-word-embeddings",
    help="Keep the word-embedding matrix fixed (faster on CPU).")]

# --------------------------------------------------------------------------- the student
Layers = Annotated[Optional[int], typer.Option("--layers", help="Student layers (default 4).")]

# --------------------------------------------------------------------------- optimisation (TrainConfig)
MaxSteps = Annotated[Optional[int], typer.Option("--max-steps", help="Optimizer steps (default: the recipe's).")]
Epochs = Annotated[Optional[float], typer.Option("--epochs", help="Epochs over the training file "
                                                 "(--max-steps overrides the recipe's epochs).")]
EvalsPerEpoch = Annotated[Optional[int], typer.Option(
    "--evals-per-epoch", help="With epochs: dev evaluations (and checkpoints) per epoch.")]
BatchSize = Annotated[Optional[int], typer.Option("--batch-size", help="Global examples per optimizer step.")]
Lr = Annotated[Optional[float], typer.Option("--lr", help="Peak learning rate.")]
WarmupRatio = Annotated[Optional[float], typer.Option(
    "--warmup-ratio", help="Linear warmup over this fraction of the run (the default way).")]
WarmupSteps = Annotated[Optional[int], typer.Option(
    "--warmup-steps", help="Warmup over exactly this many steps instead (must be < --max-steps).")]
WeightDecay = Annotated[Optional[float], typer.Option("--weight-decay", help="AdamW weight decay.")]
GradAccum = Annotated[Optional[int], typer.Option("--grad-accum", help="Micro-batches per optimizer step.")]
Bf16 = Annotated[Optional[bool], typer.Option("--bf16/--no-bf16", help="bfloat16 autocast.")]
Seed = Annotated[Optional[int], typer.Option("--seed", help="Seed of data order, masking and initialisation.")]
Device = Annotated[Optional[str], typer.Option("--device", help="auto | cpu | cuda.")]
EvalEvery = Annotated[Optional[int], typer.Option("--eval-every", help="Evaluate every N steps (0: at the end).")]
SaveEvery = Annotated[Optional[int], typer.Option("--save-every", help="Checkpoint every N steps (0: at the end).")]
LogEvery = Annotated[Optional[int], typer.Option("--log-every", help="Log a metrics line every N steps.")]

# --------------------------------------------------------------------------- export and bench
Threads = Annotated[Optional[int], typer.Option(
    "--threads", help="onnxruntime/torch intra-op threads, 1 to the CPUs this process may use.")]
RuntimeThreads = Annotated[Optional[int], typer.Option(   # torch-free commands: onnxruntime only
    "--threads", help="onnxruntime intra-op threads, 1 to the CPUs this process may use.")]
# `edgebert batch` (its words for the flags other commands also take)
RuntimeBatchSize = Annotated[int, typer.Option("--batch-size", min=1, help="Texts per onnxruntime call, in each "
                                                                           "worker.")]
BatchResume = Annotated[bool, typer.Option(
    "--resume", help="Continue a run that stopped: the parts already in --output (checked against their "
                     "record) are kept, the rest are run.")]
BatchOverwrite = Annotated[bool, typer.Option(
    "--overwrite", help="Start again in an --output this command wrote before (its files only; a folder "
                        "holding anything else is refused).")]
Calib = Annotated[Optional[Path], typer.Option(
    "--calib", help="INT8 calibration text (default: the built-in English text): one sentence per line, "
                    "a TSV with a 'sentence' column, or WikiText raw; the texts after the first "
                    "--calib-size are held out for the accuracy gate.")]
MaxAccuracyLoss = Annotated[Optional[float], typer.Option(
    "--max-accuracy-loss", help="INT8 budget vs fp32 on held-out data, 1 - the mean of the task's metric: "
                                + ", ".join(f"{t.metric} ({t.name}, {t.budget})" for t in BUNDLE_TASKS)
                                + f"; pipeline: {PIPELINE_INT8_BUDGET} (its embedding student). "
                                "The most sensitive nodes stay float until it is met.")]
CheckMaxAccuracyLoss = Annotated[Optional[float], typer.Option(     # edgebert check's own words
    "--max-accuracy-loss", help="INT8 budget this check holds the bundle to: 1 - the mean of its task's "
                                "metric against fp32 on the texts measured (default: the budget the export "
                                "gated on).")]
PackOut = Annotated[Path, typer.Option(                           # edgebert pack's own words
    "--out", "-o", help="The one-device bundle: a folder, or an archive (.tar.gz, .tgz or .zip).")]
PackTarget = Annotated[str, typer.Option(                         # edgebert pack's own words
    "--target", help="The INT8 target the device runs (portable, x86-vnni, arm64 ...: one the bundle was "
                     "exported with), or int4: the small graph of `export --int8 --int4`.")]
CheckTarget = Annotated[Optional[str], typer.Option(             # edgebert check's own words
    "--target", help="Check this INT8 graph of the bundle (portable | x86-avx2 | x86-vnni | arm64 | openvino) "
                     "instead of the one the runtime picks on this CPU.")]
Target = Annotated[Optional[str], typer.Option(
    "--target", help="INT8 deployment target(s), comma list: portable (any x86-64/ARM64 CPU) | x86-avx2 | "
                     "x86-vnni | arm64 | openvino (an OpenVINO graph besides, needs the [openvino] extra) | host: "
                     "the graphs to make (default portable; the first is the default graph).")]
LengthsFrom = Annotated[Optional[Path], typer.Option(
    "--lengths-from", help="Text or GLUE TSV whose real length mix the benchmark replays.")]


# the engine's settings (TrainConfig fields), taken by every training command
ENGINE_OPTIONS: dict[str, Any] = {
    "max_steps": MaxSteps, "batch_size": BatchSize, "lr": Lr, "warmup_ratio": WarmupRatio,
    "warmup_steps": WarmupSteps, "weight_decay": WeightDecay, "grad_accum": GradAccum, "bf16": Bf16,
    "seed": Seed, "device": Device, "eval_every": EvalEvery, "save_every": SaveEvery, "log_every": LogEvery,
    "progress": Progress,
}


def engine_options(command: Callable) -> Callable:
    """Give a training command every ``ENGINE_OPTIONS`` flag; they reach it as one argument,
    ``train``: the ``TrainConfig`` fields the user set (None: keep the recipe's)."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "train"]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=alias)
             for name, alias in ENGINE_OPTIONS.items()]

    @functools.wraps(command)
    def with_train(**values: Any) -> Any:
        given = {name: values.pop(name) for name in ENGINE_OPTIONS}
        return command(train={k: v for k, v in given.items() if v is not None}, **values)

    with_train.__signature__ = signature.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
    with_train.__annotations__ = {p.name: p.annotation for p in [*kept, *added]}
    return with_train
