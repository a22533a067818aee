"""Embedding students judged downstream (issue #22): distil all-MiniLM-L6-v2 into a 4-layer student with
each named recipe, export it (fused fp32 + gated INT8, as ``edgebert pipeline`` does), and score the
teacher, the student fp32 and the student INT8 on held-out data (``edgebert.stages.embed_eval``: MRPC
dev paraphrase ROC-AUC, SST-2 dev probe accuracy, WikiText-2 test retrieval recall@1/@10 and MRR).

Training text is what the project has and never a scored set: WikiText-2 *valid* paragraphs (one
document per article), SST-2 *train* and MRPC *train* sentences (documents of 50 lines), written once
to ``RUNS/train.txt`` (corpus format ``lines``); the distiller holds 5% of those documents out for its
own agreement figures. The INT8 calibration text is WikiText-2 valid paragraphs too. Every recipe is a
``Recipe`` below: a distillation preset plus any ``DistillConfig`` field (``max_seq_len``,
``layer_map``, ``alpha_cos`` / ``alpha_hidden`` / ``alpha_attn``, ``freeze_word_embeddings``, ...), the
steps, batch size and learning rate, and the training text (``project`` or ``builtin``: Python's
documentation, what ``make demo`` trains on). Add one to ``RECIPES`` to try it.

Writes ``benchmarks/results/embed_students/embed_students.{json,md}`` (with ``--smoke``: tiny budgets and data caps,
``RUNS/embed_students_smoke.{json,md}`` instead, never the results folder): per recipe the wall time of
distillation, export and scoring, the three columns with retention (student / teacher), the CPU
(``edgebert.system.environment.describe``) and the load average before and after (a busy machine
slows the wall times, never the scores).

    .venv/bin/python benchmarks/embed_students.py [--recipes demo,demo-builtin] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "embed_students"
SHARED = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))


@dataclass(frozen=True)
class Recipe:
    """One student: ``DistillConfig.preset(preset, ..., **fields)`` trained ``steps`` x ``batch_size``."""

    note: str
    steps: int
    batch_size: int = 16
    lr: float | None = None                # None: the preset's (embed: 5e-4)
    preset: str = "embed"
    corpus: str = "project"                # project: WikiText-2 valid + SST-2/MRPC train; builtin: Python docs;
                                           # project-sentences: project + WikiText-2 valid's single sentences
    fields: dict[str, Any] = field(default_factory=dict)   # any DistillConfig field
    seed: int = 0                          # the training seed (data order, dropout)
    int8_budget: float = 0.01              # the export's INT8 gate: 1 - mean cosine vs fp32 on held-out text
    int4: bool = False                     # also export the small graph (export --int4)
    int4_budget: float | None = None       # its own gate budget (None: int8_budget)
    export_max_len: int | None = None      # export --max-seq-len (the position rows past it left out)


RECIPES: dict[str, Recipe] = {
    # `make demo`'s distillation (PIPELINE_PRESETS["demo"] over DISTILL_DEFAULTS["embed"] and the "embed"
    # preset: 90 steps of 16 texts cut at 64 tokens, lr 5e-4, cosine of the last hidden states, word
    # embeddings frozen, teacher layers [0, 2, 3, 5]) on the project's text
    "demo": Recipe("make demo's recipe on the project's text", steps=90, fields={"max_seq_len": 64}),
    # the same on the built-in corpus, exactly what `make demo` trains on
    "demo-builtin": Recipe("make demo's recipe on its own built-in corpus", steps=90, corpus="builtin",
                           fields={"max_seq_len": 64}),
    # the pipeline's default without the demo preset (DISTILL_DEFAULTS["embed"]: 250 x 16, 128 tokens)
    "pipeline-250": Recipe("the pipeline's default distillation for an encoder", steps=250,
                           fields={"max_seq_len": 128}),
    # the 20-minute budget spent on steps: ~10x the pipeline's default (0.2 s a step on 2 cores)
    "long-2400": Recipe("pipeline recipe, 2,400 steps (20-minute budget)", steps=2400,
                        fields={"max_seq_len": 128}),
    # the same with the in-batch similarity of the pooled sentence vectors distilled too (relational KD:
    # which sentences the teacher finds close, what retrieval ranks by)
    "long-2400-sim": Recipe("2,400 steps + in-batch similarity of pooled vectors (alpha_sim 1)", steps=2400,
                            fields={"max_seq_len": 128, "alpha_sim": 1.0}),
    "long-2400-sim01": Recipe("2,400 steps + in-batch similarity, weight 0.1", steps=2400,
                              fields={"max_seq_len": 128, "alpha_sim": 0.1}),
    # trained at the scored length: retrieval embeds paragraphs of up to 256 tokens, the 128-token recipes
    # never show the student a position past 128
    "long-256": Recipe("1,600 steps at 256 tokens (the retrieval texts' length)", steps=1600,
                       fields={"max_seq_len": 256}),
    "long-256-2800": Recipe("2,800 steps at 256 tokens", steps=2800, fields={"max_seq_len": 256}),
    # + the cosine of the mean-pooled sentence vectors (what retrieval ranks by; the token cosine leaves
    # each token's length, and so its weight in the mean, free)
    "long-256-pool": Recipe("2,800 steps at 256 tokens + pooled-vector cosine (alpha_pool 1)", steps=2800,
                            fields={"max_seq_len": 256, "alpha_pool": 1.0}),
    # the word embeddings trained too (the preset keeps the teacher's): dense Adam over the 30k x 384
    # matrix makes a step ~3x as slow (stopped at step 200: 2,800 steps would take ~33 minutes)
    "long-256-words": Recipe("2,800 steps at 256 tokens, word embeddings trained", steps=2800,
                             fields={"max_seq_len": 256, "freeze_word_embeddings": False}),
    # retrieval queries are single Wikipedia sentences; the project text has Wikipedia only as paragraphs:
    # WikiText-2 valid's sentences added as texts of their own (documents of DOC_LINES)
    # + TinyBERT's attention term (KL of each mapped layer's attention distributions): what the student attends to
    "long-sent-attn": Recipe("3,600 steps at 128 tokens, + WikiText-2 valid sentences, + attention KL", steps=3600,
                             corpus="project-sentences", fields={"max_seq_len": 128, "alpha_attn": 1.0}),
    # long-sent-attn exported with the tighter INT8 gate below (its figures in embed_rescore_attn_gate.md came from
    # re-exporting the saved long-sent-attn student with these export settings; the distillation is the same)
    "long-sent-attn-gate": Recipe("long-sent-attn, INT8 gate 0.0006", steps=3600, int8_budget=0.0006,
                                  corpus="project-sentences", fields={"max_seq_len": 128, "alpha_attn": 1.0}),
    # the same, seed 1, exported with a tighter INT8 gate (0.0006: the gate keeps the most sensitive attention
    # projections float; long-sent-attn re-exported that way kept R@1 97.9%, MRR 97.4% in INT8): does it hold?
    "long-sent-attn-seed1": Recipe("long-sent-attn, seed 1, INT8 gate 0.0006", steps=3600, seed=1, int8_budget=0.0006,
                                   corpus="project-sentences", fields={"max_seq_len": 128, "alpha_attn": 1.0}),
    # issue #50: a width-256 student (embed-narrow: 8 heads of 32, FFN 1024, the word table sliced and trained, the
    # cosine and hidden terms through a learned projection) for a bundle under 10 MB; the preset's in-batch
    # similarity term is off (alpha_sim 1 cost the width-384 student a third of its R@1, long-2400-sim above)
    "narrow-256": Recipe("width 256, 3,600 steps at 128 tokens, + WikiText-2 valid sentences, + attention KL",
                         steps=3600, preset="embed-narrow", corpus="project-sentences", int8_budget=0.0006, int4=True,
                         fields={"max_seq_len": 128, "alpha_sim": 0.0}),
    # issue #50: the embed-long student trained 4-bit-aware (distill --int4-aware 128: encoder weights rounded as
    # MatMulNBits rounds them at block 128, the frozen word table replaced by its 4-bit round trip), so its fp32
    # graph is the 4-bit model and the small graph can take every MatMul and the table at 4 bits
    "long-sent-attn-q4": Recipe("long-sent-attn trained 4-bit-aware at block 128", steps=3600, int8_budget=0.0006,
                                int4=True, int4_budget=0.0006, corpus="project-sentences", export_max_len=256,
                                fields={"max_seq_len": 128, "alpha_attn": 1.0, "int4_block": 128}),
    # the usual order instead: the float long-sent-attn student first (run that recipe before), then fine-tuned
    # through the 4-bit rounding from its own weights (distill --init DIR --int4-aware 128) at a tenth of the rate
    "long-sent-attn-q4-ft": Recipe("long-sent-attn's student fine-tuned 4-bit-aware at block 128", steps=1200,
                                   lr=1e-4, int8_budget=0.0006, int4=True, int4_budget=0.0006, export_max_len=256,
                                   corpus="project-sentences",
                                   fields={"max_seq_len": 128, "alpha_attn": 1.0, "int4_block": 128,
                                           "student_init": "{runs}/long-sent-attn/student"}),
    "long-sent-4200": Recipe("4,200 steps at 128 tokens, + WikiText-2 valid sentences", steps=4200,
                             corpus="project-sentences", fields={"max_seq_len": 128}),
    # the same with the intermediate hidden states distilled too (teacher layers [0, 2, 3, 5] -> 4)
    "long-2400-hidden": Recipe("2,400 steps + intermediate hidden states (alpha_hidden 1)", steps=2400,
                               fields={"max_seq_len": 128, "alpha_hidden": 1.0}),
}
SMOKE = dict(steps=4, batch_size=4, max_seq_len=32, train_lines=400, calib_size=16, gate_size=16,
             probe_examples=200, paragraphs=30, limit=60)
DOC_LINES = 50          # SST-2 / MRPC sentences per training document


def training_text(path: Path, max_lines: int | None = None, wiki_sentences: bool = False) -> Path:
    """WikiText-2 valid paragraphs (an article per document) + SST-2 and MRPC train sentences (documents of
    ``DOC_LINES``), corpus format ``lines``; never a dev or test file."""
    from edgebert.data.corpus import paragraphs, read_corpus
    from edgebert.data.tasks import read_task_tsv
    from edgebert.files.atomic import write_text

    docs = [doc for doc in ("\n".join(paragraphs([article], 3)) for article in
                            read_corpus(SHARED / "wikitext-2-raw" / "wiki.valid.raw", "wikitext")) if doc]
    sentences = split_sentences(docs) if wiki_sentences else []
    sentences += [e.text_a for e in read_task_tsv(SHARED / "sst2" / "train.tsv", "sst2")[0]]
    for e in read_task_tsv(SHARED / "mrpc" / "train.tsv", "mrpc")[0]:
        sentences += [e.text_a, e.text_b or ""]
    sentences = list(dict.fromkeys(s for s in sentences if len(s.split()) >= 3))
    docs += ["\n".join(sentences[i:i + DOC_LINES]) for i in range(0, len(sentences), DOC_LINES)]
    if max_lines:   # smoke: a few documents of each source
        docs = docs[:4] + docs[-4:]
        docs = ["\n".join(d.splitlines()[:max_lines // 8]) for d in docs]
    write_text(path, "\n\n".join(docs) + "\n")
    return path


def split_sentences(docs: list[str], min_words: int = 5) -> list[str]:
    """The sentences of WikiText paragraphs (one per line of ``docs``), each of at least ``min_words``:
    texts shaped like the retrieval queries (a paragraph's first sentence), from the training split."""
    from edgebert.stages.embed_eval import _SENTENCE_END

    cut = lambda para: _SENTENCE_END.sub(lambda m: m.group(0).rstrip() + "\n", para).splitlines()  # noqa: E731
    return [s.strip() for doc in docs for para in doc.splitlines() for s in cut(para) if len(s.split()) >= min_words]


def calibration_text(path: Path, lines: int = 1000) -> Path:
    from edgebert.data.corpus import paragraphs, read_corpus
    from edgebert.files.atomic import write_text

    texts = paragraphs(read_corpus(SHARED / "wikitext-2-raw" / "wiki.valid.raw", "wikitext"), 8)[:lines]
    write_text(path, "\n".join(texts) + "\n")
    return path


def distill_student(name: str, recipe: Recipe, teacher: Path, corpus: Path | None, out: Path, smoke: bool):
    from edgebert.stages.distill import DistillConfig, distill

    steps = SMOKE["steps"] if smoke else recipe.steps
    train = {"max_steps": steps, "batch_size": SMOKE["batch_size"] if smoke else recipe.batch_size,
             "eval_every": steps, "save_every": steps, "log_every": min(20, steps), "progress": False,
             "seed": recipe.seed}
    if recipe.lr is not None:
        train["lr"] = recipe.lr
    fields = {**recipe.fields, **({"max_seq_len": SMOKE["max_seq_len"], "max_eval_examples": 16} if smoke else {})}
    if "student_init" in fields:                       # a student an earlier recipe saved under --runs
        fields["student_init"] = fields["student_init"].format(runs=out.parents[1])
    text = {"corpus": (corpus,), "corpus_format": "lines"} if recipe.corpus.startswith("project") else {}
    cfg = DistillConfig.preset(recipe.preset, teacher, out, layers=fields.pop("layers", 4), train=train,
                               overwrite=True, **text, **fields)
    result = distill(cfg)
    return result, cfg


def export_student(student: Path, out: Path, calib: Path, smoke: bool, budget: float = 0.01, int4: bool = False,
                   int4_budget: float | None = None, max_len: int | None = None):
    from edgebert.exporters import ExportConfig, export_bundle

    sizes = {"calib_size": SMOKE["calib_size"], "gate_size": SMOKE["gate_size"]} if smoke else {"calib_size": 128}
    return export_bundle(ExportConfig(model_dir=student, out_dir=out, task="embed", int8=True, calib=calib,
                                      max_accuracy_loss=budget, validation_batch_sizes=(1, 3), overwrite=True, int4=int4,
                                      int4_max_accuracy_loss=int4_budget if int4 else None,
                                      max_sequence_length=max_len, **sizes))


def run_recipe(name: str, recipe: Recipe, teacher: Path, corpus: Path, calib: Path, data, teacher_scores: dict,
               runs: Path, smoke: bool, length: int) -> dict[str, Any]:
    from edgebert.stages.embed_eval import downstream_scores, retention

    print(f"== {name}: {recipe.note}", flush=True)
    t0 = time.perf_counter()
    result, cfg = distill_student(name, recipe, teacher, corpus, runs / name / "student", smoke)
    distill_s = time.perf_counter() - t0
    exported = export_student(result.out_dir, runs / name / "bundle", calib, smoke, recipe.int8_budget,
                              recipe.int4, recipe.int4_budget, recipe.export_max_len)
    row: dict[str, Any] = {"recipe": asdict(recipe), "steps": result.steps, "layer_map": result.layer_map,
                           "max_seq_len": cfg.max_seq_len, "lr": cfg.train.lr, "batch_size": cfg.train.batch_size,
                           "train_texts": result.num_train_examples, "distill_s": round(distill_s, 1),
                           "export_s": round(exported.seconds, 1), "agreement": result.eval_metrics,
                           "agreement_before": result.start_metrics, "scores": {}, "retention": {}, "score_s": {}}
    for precision in ("fp32", "int8") + (("int4",) if recipe.int4 else ()):
        run = downstream_scores(exported.bundle_dir, data, precision, max_seq_len=length)
        row["scores"][precision] = run["metrics"]
        row["retention"][precision] = retention(run["metrics"], teacher_scores)
        row["score_s"][precision] = run["details"]["seconds"]
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    print(f"   {name}: distill {distill_s:.0f} s, export {exported.seconds:.0f} s, retention INT8 " + ", ".join(
        f"{k} {100 * v:.0f}%" for k, v in row["retention"]["int8"].items() if v is not None), flush=True)
    return row


LABELS = (("MRPC AUC", "mrpc_auc"), ("SST-2 probe", "sst2_probe_accuracy"), ("R@1", "retrieval_recall_at_1"),
          ("R@10", "retrieval_recall_at_10"), ("MRR", "retrieval_mrr"))


def markdown(result: dict[str, Any]) -> str:
    env, teacher = result["environment"], result["teacher"]
    out = ["# Embedding students judged downstream (all-MiniLM-L6-v2 -> 4 layers)", "",
           ("**Smoke run: tiny budgets and data caps; the figures say nothing about the recipes.**\n"
            if result["smoke"] else ""),
           f"Held-out data ({result['data']['root']}): MRPC dev {result['data']['mrpc_pairs']} pairs (paraphrase "
           f"ROC-AUC of the cosine), SST-2 logistic probe trained on {result['data']['sst2_train']} train sentences, "
           f"scored on {result['data']['sst2_dev']} dev, WikiText-2 test retrieval over "
           f"{result['data']['paragraphs']} paragraphs (first sentence -> the rest). Mean pooling, texts cut at "
           f"{result['max_seq_len']} tokens. Retention = student / teacher.", "",
           f"CPU: {env.get('cpu')} ({env.get('cpu_count')} CPUs), torch {env.get('torch')}, onnxruntime "
           f"{env.get('onnxruntime')}; load average {result['load_before']} before, {result['load_after']} after "
           f"(wall times are indicative on a busy machine; the scores are not affected).", "",
           "| model | " + " | ".join(label for label, _ in LABELS) + " | wall time |",
           "|---|" + "---|" * (len(LABELS) + 1),
           "| teacher (PyTorch fp32) | " + " | ".join(f"{teacher[k]:.3f}" for _, k in LABELS)
           + f" | scoring {result['teacher_score_s']:.0f} s |"]
    for name, row in result["recipes"].items():
        for precision in row["scores"]:
            scores, kept = row["scores"][precision], row["retention"][precision]
            cells = " | ".join(f"{scores[k]:.3f} ({100 * kept[k]:.0f}%)" if kept.get(k) is not None
                               else f"{scores[k]:.3f}" for _, k in LABELS)
            wall = (f"distill {row['distill_s']:.0f} s + export {row['export_s']:.0f} s" if precision == "fp32"
                    else f"scoring {row['score_s'][precision]:.0f} s")
            out.append(f"| {name} {precision if precision == 'fp32' else precision.upper()} | {cells} | {wall} |")
    out += ["", "| recipe | what | steps x batch | tokens | lr | layer map | training texts | agreement cosine "
                "(before) |", "|---|---|---|---|---|---|---|---|"]
    for name, row in result["recipes"].items():
        cos = row["agreement"].get("embedding_cosine_mean")
        before = row["agreement_before"].get("embedding_cosine_mean")
        out.append(f"| {name} | {row['recipe']['note']} | {row['steps']} x {row['batch_size']} | {row['max_seq_len']} "
                   f"| {row['lr']:g} | {row['layer_map']} | {row['train_texts']} | "
                   f"{'-' if cos is None else f'{cos:.3f}'} ({'-' if before is None else f'{before:.3f}'}) |")
    out += ["", f"Total {result['wall_s']:.0f} s. Command: `{result['command']}`", ""]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated, of {', '.join(RECIPES)}")
    ap.add_argument("--teacher", type=Path, default=None, help="default: the installed all-MiniLM-L6-v2")
    ap.add_argument("--data", type=Path, default=SHARED, help="the downstream folder (default ../shared/data)")
    ap.add_argument("--runs", type=Path, default=REPO / "runs" / "embed_students")
    ap.add_argument("--smoke", action="store_true", help="tiny budgets and data caps (checks the script runs)")
    ap.add_argument("--stem", default="embed_students", help="results file name (keeps other recipes' results)")
    args = ap.parse_args()
    names = [n.strip() for n in args.recipes.split(",") if n.strip()]
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        raise SystemExit(f"unknown recipe(s) {unknown}; use some of {', '.join(RECIPES)}")

    from edgebert.files.atomic import write_json, write_text
    from edgebert.pipeline.config import installed_teacher
    from edgebert.stages.embed_eval import MAX_SEQ_LEN, DownstreamData, downstream_scores
    from edgebert.system.environment import describe

    t0, load_before = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    teacher = args.teacher or installed_teacher()
    args.runs.mkdir(parents=True, exist_ok=True)
    caps = {k: SMOKE[k] for k in ("probe_examples", "paragraphs", "limit")} if args.smoke else {}
    data = DownstreamData.load(args.data, **caps)
    sentences = any(RECIPES[n].corpus == "project-sentences" for n in names)
    if sentences and any(RECIPES[n].corpus == "project" for n in names):
        raise SystemExit("run project and project-sentences recipes in separate invocations")
    corpus = training_text(args.runs / ("train_sentences.txt" if sentences else "train.txt"),
                           SMOKE["train_lines"] if args.smoke else None, sentences)
    calib = calibration_text(args.runs / "calib.txt", 64 if args.smoke else 1000)
    print(f"teacher {teacher}: scoring on {data.describe()}", flush=True)
    teacher_run = downstream_scores(teacher, data, max_seq_len=MAX_SEQ_LEN)
    rows = {name: run_recipe(name, RECIPES[name], teacher, corpus, calib, data, teacher_run["metrics"], args.runs,
                             args.smoke, MAX_SEQ_LEN) for name in names}
    result = {"benchmark": "embed_students", "smoke": args.smoke, "teacher_dir": str(teacher),
              "teacher": teacher_run["metrics"], "teacher_score_s": teacher_run["details"]["seconds"],
              "max_seq_len": MAX_SEQ_LEN, "data": data.describe(), "training_text": str(corpus),
              "recipes": rows, "wall_s": round(time.perf_counter() - t0, 1), "load_before": load_before,
              "load_after": [round(x, 2) for x in os.getloadavg()], "environment": describe(),
              "command": "python benchmarks/embed_students.py " + " ".join(sys.argv[1:])}
    folder, stem = (args.runs, f"{args.stem}_smoke") if args.smoke else (RESULTS, args.stem)
    write_json(folder / f"{stem}.json", result)
    write_text(folder / f"{stem}.md", markdown(result))
    print(markdown(result))
    print(f"written: {folder / stem}.json, .md")


if __name__ == "__main__":
    main()
