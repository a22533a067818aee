"""The question-answering quick path: a fine-tuned ``...ForQuestionAnswering`` checkpoint -> ``edgebert import-hf``
-> ``export --int8`` -> ``answer`` / ``check``, each step timed as a user runs it (one CLI process), and SQuAD dev
EM / F1 of the INT8 and fp32 bundles beside the checkpoint in transformers' own question-answering pipeline.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/qa_quick_path.py --checkpoint DIR     # a checkpoint you have
    PYTHONPATH=$PWD .venv/bin/python benchmarks/qa_quick_path.py                      # makes one first (below)

No fine-tuned QA checkpoint can be downloaded here, so without ``--checkpoint`` the script first makes the one a
user would bring: all-MiniLM-L6-v2 fine-tuned by transformers' ``BertForQuestionAnswering`` on the train file
with the ``run_qa`` recipe (``squad_qa.train_reference``; bfloat16 autocast where the CPU multiplies bf16
natively). Its training time is recorded apart: it is not part of the quick path.

Scoring: every path answers every dev question with transformers' pipeline defaults (``max_answer_len`` 15,
384-token windows, stride 128, the empty answer not competing), the same post-processing on both sides
(``EdgeSession.answer`` is that pipeline's); EM / F1 over the answerable questions (SQuAD 1.1 scoring,
``edgebert.scores.squad``). Writes ``benchmarks/results/qa_quick_path/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distill_stages import REPO, RESULTS  # noqa: E402
from squad_qa import DEV, TRAIN, bf16_cpu, train_reference  # noqa: E402

SUITE = RESULTS / "qa_quick_path"
QUESTION = "What does the bundle hold?"
CONTEXT = ("An edgebert bundle holds the fused fp32 graph, its INT8 graphs, the tokenizer and a manifest "
           "that names every file with its hash.")


def edgebert(*args: str | Path) -> tuple[float, str]:
    """One CLI command in its own process: (wall seconds, its output)."""
    cmd = [str(REPO / ".venv" / "bin" / "edgebert"), *map(str, args)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stdout[-1500:]}\n{out.stderr[-1500:]}")
    return round(wall, 2), out.stdout


def checkpoint_stage(runs: Path) -> tuple[Path, dict]:
    out = runs / "checkpoint"
    done = out / "stage.json"
    if not done.is_file():
        out.mkdir(parents=True, exist_ok=True)
        done.write_text(json.dumps(train_reference(out, None, None, bf16=bf16_cpu())))
    return out, json.loads(done.read_text())


def pipeline_answers(checkpoint: Path, examples) -> tuple[dict[str, str], float]:
    import transformers as tf

    tf.logging.set_verbosity_error()
    pipe = tf.pipeline("question-answering", model=tf.AutoModelForQuestionAnswering.from_pretrained(checkpoint),
                       tokenizer=tf.AutoTokenizer.from_pretrained(checkpoint))
    t0 = time.perf_counter()
    found = pipe(question=[e.question for e in examples], context=[e.context for e in examples])
    return {e.id: a["answer"] for e, a in zip(examples, found)}, time.perf_counter() - t0


def bundle_answers(bundle: Path, examples, precision: str) -> tuple[dict[str, str], float, str]:
    from edgebert.runtime import EdgeSession

    session = EdgeSession(bundle, precision=precision)
    t0 = time.perf_counter()
    found = session.answer([e.question for e in examples], [e.context for e in examples])
    return {e.id: a["answer"] for e, a in zip(examples, found)}, time.perf_counter() - t0, session.model_key


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, help="a fine-tuned ...ForQuestionAnswering folder (default: make one)")
    ap.add_argument("--runs", type=Path, default=REPO / "runs" / "qa_quick")
    ap.add_argument("--name", default="minilm_squad")
    ap.add_argument("--limit", type=int, default=None, help="score the first N dev questions only")
    args = ap.parse_args()

    from edgebert.files.atomic import write_json, write_text
    from edgebert.qa.squad_file import read_squad
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.scores.squad import squad_scores
    from edgebert.system.environment import versions

    made = None
    if args.checkpoint is None:
        args.checkpoint, made = checkpoint_stage(args.runs)
    model, bundle = args.runs / "model", args.runs / "bundle"
    load_before = [round(x, 2) for x in os.getloadavg()]
    steps = {}
    steps["import-hf"], _ = edgebert("import-hf", args.checkpoint, "--out", model, "--overwrite")
    steps["export --int8"], export_out = edgebert("export", model, "--out", bundle, "--int8", "--calib", TRAIN,
                                                  "--overwrite")
    steps["answer (one question)"], answer_out = edgebert("answer", bundle, QUESTION, "--context", CONTEXT)
    steps["check"], check_out = edgebert("check", bundle)
    load_after = [round(x, 2) for x in os.getloadavg()]

    examples = read_squad(DEV)[: args.limit]
    answerable = [e for e in examples if e.has_answer]
    scores, walls, keys = {}, {}, {}
    answers, walls["transformers pipeline"] = pipeline_answers(args.checkpoint, answerable)
    scores["transformers pipeline (checkpoint, PyTorch fp32)"] = squad_scores(answerable, answers)
    for precision in ("fp32", "int8"):
        found, wall, keys[precision] = bundle_answers(bundle, answerable, precision)
        scores[f"bundle {precision}"] = squad_scores(answerable, found)
        walls[f"bundle {precision}"] = wall
        scores[f"bundle {precision}"]["same_answer_as_pipeline"] = sum(found[k] == v for k, v in answers.items())
    host = detect_host()
    result = {"checkpoint": str(args.checkpoint), "checkpoint_made_here": made, "steps_s": steps,
              "load_average": {"before": load_before, "after": load_after}, "dev": str(DEV.name),
              "questions": len(answerable), "scores": scores, "answer_wall_s": {k: round(v, 1) for k, v in walls.items()},
              "int8_graph": keys.get("int8"), "answer_output": answer_out.strip(),
              "check_verdict": check_out.strip().splitlines()[-1], "export_summary": export_out.strip().splitlines()[-8:],
              "machine": {"cpu": host.model, "kind": host.kind, "u8s8": host.u8s8}, "versions": versions()}
    write_json(SUITE / f"{args.name}.json", result)
    write_text(SUITE / f"{args.name}.md", markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [f"# Question answering in minutes: {Path(r['checkpoint']).name} -> INT8 bundle", "",
             f"CPU: {m['cpu']} ({m['kind']}, U8S8 {m['u8s8']}); load average before the steps {r['load_average']['before']}, "
             f"after {r['load_average']['after']}. Versions: "
             + ", ".join(f"{k} {v}" for k, v in r["versions"].items() if v), "",
             "| step (one CLI process each) | wall s |", "|---|---:|"]
    lines += [f"| `edgebert {k}` | {v} |" for k, v in r["steps_s"].items()]
    lines += ["", f"Dev: {r['dev']}, {r['questions']} answerable questions, transformers' pipeline defaults on every path.",
              "", "| path | EM | F1 | same answer as the pipeline | answering wall s |", "|---|---:|---:|---:|---:|"]
    wall = dict(zip(r["scores"], r["answer_wall_s"].values()))
    for name, s in r["scores"].items():
        same = s.get("same_answer_as_pipeline")
        agree = "-" if same is None else f"{same} / {r['questions']}"
        lines.append(f"| {name} | {s['exact_match']:.2f} | {s['f1']:.2f} | {agree} | {wall[name]} |")
    ref = r["scores"]["transformers pipeline (checkpoint, PyTorch fp32)"]["f1"]
    lines += ["", f"INT8 bundle ({r['int8_graph']}) - checkpoint in transformers: "
                  f"**{r['scores']['bundle int8']['f1'] - ref:+.2f}** F1 (budget: within 0.5).",
              f"`check`: {r['check_verdict']}"]
    if r.get("checkpoint_made_here"):
        c = r["checkpoint_made_here"]
        lines += ["", f"The checkpoint (not part of the quick path): {c['command']}, {c['steps']} steps, "
                      f"{c['wall_s']} s, recipe {c['recipe']}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
