"""``edgebert check``: run on the device that will serve a bundle, and say whether its INT8 graph is
right *there*. Torch-free (onnxruntime, tokenizers, numpy).

1. re-hash every file against the manifest;
2. read this host's instruction sets and probe onnxruntime's U8S8 kernel (``hostcpu``);
3. list the bundle's INT8 graphs with what each needs, and pick one as ``EdgeSession`` does
   (``int8_choice``: a graph that would saturate here is loaded with exact products, or refused; an
   OpenVINO graph only when asked for: ``int8_choice.OPENVINO_DEFAULT_ON`` lists no CPU kind yet);
4. re-measure that graph (a one-device bundle of the small graph, ``pack --target int4``: that graph) against
   the bundle's fp32 graph on this machine, on the built-in held-out text (the same texts the export gate
   used) or ``--data``, with the task metric of the gate;
5. time both on the same batches (interleaved, spinning off) to show what INT8 buys here;
   A ``qa`` bundle is measured on questions (a SQuAD JSON ``--data`` file, else the built-in held-out
   questions): the overlap F1 of the INT8 graph's answers with the fp32 graph's, through
   ``EdgeSession.answer``;
6. for a ``token-cls`` bundle and a CoNLL ``--data`` file: entity F1 of fp32 and INT8 against the
   file's gold tags, through ``EdgeSession.tag`` (needs seqeval, a training/evaluation package; without
   it the report says so and the verdict stays the gate's).

Pass when the measured loss fits the budget (``--max-accuracy-loss``, else the one the export gated
with); every failure names its reason: a bundle whose files, tokenizer or graphs disagree, or whose
graphs fail or give NaN on this machine, is a ``FAIL:`` line with the typed error's message.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from edgebert.bundle import Manifest, ModelEntry, read_manifest, verify_entry, verify_files
from edgebert.bundle.task_registry import bundle_task, check_budget
from edgebert.errors import BundleError, ConfigError, EdgebertError
from edgebert.files.textfiles import is_conll, read_conll
from edgebert.qa.rank_groups import BUILTIN_GROUPS
from edgebert.runtime.fidelity import DEFAULT_BUDGETS, OUTPUT, FidelityTracker, answer_spans
from edgebert.runtime.float_reference import measure_against_reference, read_reference
from edgebert.runtime.held_out import BUILTIN_HELD_OUT, measured_texts
from edgebert.runtime.hostcpu import PRECISION_OPTION, detect_host
from edgebert.runtime.int8_choice import choose_openvino
from edgebert.runtime.tagging import tag_sentences
from edgebert.runtime.text import length_sorted_batches, pad_batch

BATCH = 32
UNITS = {"texts": "texts", "questions": "questions", "choices": "texts", "pairs": "queries"}   # what fidelity.n counts


@dataclass
class CheckReport:
    """What ``check_bundle`` found; ``passed`` and ``reason`` are the verdict."""

    bundle: str
    task: str
    passed: bool
    reason: str
    host: dict[str, Any]
    graphs: list[dict[str, Any]] = field(default_factory=list)
    chosen: dict[str, Any] | None = None
    texts: dict[str, Any] | None = None
    fidelity: dict[str, Any] | None = None
    export_fidelity: dict[str, Any] | None = None
    budget: float | None = None
    speed: dict[str, Any] | None = None
    entities: dict[str, Any] | None = None     # token-cls + CoNLL --data: entity F1 vs the gold tags
    small: dict[str, Any] | None = None        # the small (int4) graph re-measured here, when the bundle has one

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The human-readable report, the verdict last."""
        out = [f"bundle: {self.bundle} (task {self.task}), files verified against manifest.json"
               if not self.reason.startswith("FAIL: bundle files") else f"bundle: {self.bundle}",
               f"host: {self.host['summary']}"]
        for g in self.graphs:
            out.append(f"  {g.get('kind', 'int8')} graph {g['target']:<10} {g['file']:<26} needs {g['needs']:<38} here: {g['here']}")
        if self.chosen:
            out.append(f"chosen: {self.chosen['target']} ({self.chosen['reason']})")
        if self.small:
            m = self.small
            low = f" (min {m['min']:.5f})" if m.get("min") is not None else ""     # a label agreement has none
            out.append(f"small (int4) graph, not the default: {m['metric']} {m['mean']:.5f}{low}, "
                       f"loss {m['loss']:.5f} {'<=' if m['within_budget'] else '>'} budget {m['budget']:g}")
        if self.fidelity:
            f = self.fidelity
            unit = UNITS[bundle_task(self.task).inputs]
            line = (f"fidelity: {f['metric']} mean {f['mean']:.5f}" + (f" min {f['min']:.5f}" if f.get("min") is not None else "")
                    + (f" top-1 {f['top1_agreement']:.4f}" if f.get("top1_agreement") is not None else "")
                    + f" vs fp32 on {f['n']} {self.texts['source']} {unit}")
            if self.texts.get("reference"):             # a one-device bundle: no fp32 graph here
                line += f" ({self.texts['reference']})"
            if self.export_fidelity:
                e = self.export_fidelity        # the same texts' (questions') first n, or the export's own
                same = e.get("source") in (f"{self.texts['source']} text", f"{self.texts['source'].split()[0]} {unit}")
                where = ("these" if same and e["n"] == f["n"] else f"the first {e['n']} of these" if same
                         else f"{e['n']} {unit} of {e.get('source') or 'its held-out data'}")
                other = f"{e['metric']} " if e.get("metric") != f["metric"] else ""     # qa: F1 vs gold answers
                line += f" (the export's gate measured {other}{e['mean']:.5f} on {where})"
            out.append(line)
        if self.entities:
            e = self.entities
            out.append(f"entities: {e['note']}" if "note" in e else
                       f"entity F1 vs the gold tags of {e['sentences']} sentences: fp32 {e['fp32']['f1']:.4f}, "
                       f"int8 {e['int8']['f1']:.4f} ({100 * (e['int8']['f1'] - e['fp32']['f1']):+.2f} points)")
        if self.speed:
            s = self.speed
            out.append(f"speed here: int8 {s['int8_texts_per_s']:.0f} texts/s, fp32 {s['fp32_texts_per_s']:.0f} "
                       f"texts/s (int8 {s['int8_speedup']:.2f}x), batches of {BATCH}, interleaved")
        out.append(self.reason)
        return out


def _describe_graph(entry: ModelEntry, host) -> dict[str, Any]:
    exact = entry.needs_exact_u8s8
    if not exact:
        here = "exact (weights cannot saturate)"
    elif not host.saturates:
        here = "exact (this CPU's U8S8 kernel is exact)"
    elif host.precise_fix:
        here = f"exact only with {PRECISION_OPTION}=1 (slower)"
    else:
        here = "WRONG here (saturating kernel, no fix)"
    return {"target": str(entry.target), "file": entry.file, "here": here, "kind": entry.precision,
            "needs": "exact U8S8 (VNNI / ARM64)" if exact else "nothing (exact on any x86-64 / ARM64)"}


def _describe_openvino(manifest, entry: ModelEntry, host) -> dict[str, Any]:
    """The OpenVINO graph's line: whether a session here picks it by default, and why (``choose_openvino``)."""
    chosen, why_not = choose_openvino(manifest, host)
    here = "picked here by default" if chosen is not None else why_not
    return {"target": str(entry.target), "file": entry.file, "here": here, "needs": "the openvino package"}


def _check_target(bundle_dir: Path, manifest: Manifest, target: str | None) -> None:
    """``target`` (``--target``) names one of the bundle's INT8 graphs, else a usage error listing them: a
    target the bundle has no graph for is not a failed bundle. (A bundle with no INT8 graph at all fails
    the check, with or without a target.)"""
    have = list(dict.fromkeys(str(e.target) for e in {**manifest.int8_graphs(), **manifest.openvino_graphs()}.values()))
    if target is not None and have and target not in have:
        raise ConfigError(f"--target {target!r} names no INT8 graph of {bundle_dir} (its INT8 targets: "
                          f"{', '.join(have)})", "pass one of them, or leave --target out for the graph the "
                                                 "runtime picks on this CPU")


def check_bundle(bundle_dir: str | Path, data: str | Path | None = None, *, max_texts: int = 512,
                 max_accuracy_loss: float | None = None, int8_target: str | None = None,
                 threads: int | None = None) -> CheckReport:
    """Check ``bundle_dir`` on this machine; see the module docstring. ``BundleError`` only when the
    folder is not a bundle at all (every other problem is a failed check with its reason)."""
    from edgebert.runtime.session import EdgeSession
    from edgebert.system.environment import check_threads

    check_threads(threads)          # a bad argument is a usage error (exit 2), not a failed check
    max_accuracy_loss = check_budget(max_accuracy_loss)
    bundle_dir = Path(bundle_dir)
    manifest = read_manifest(bundle_dir)
    _check_target(bundle_dir, manifest, int8_target)
    host = detect_host()
    task, spec = manifest.task, bundle_task(manifest.task)
    report = CheckReport(str(bundle_dir), task, False, "", {**host.as_dict(), "summary": host.summary()})
    try:
        verify_files(bundle_dir, manifest)      # every byte hashed (and stamped: files.stamps)
    except BundleError as exc:
        report.reason = f"FAIL: bundle files do not match the manifest: {exc.one_line()}"
        return report
    try:    # each ONNX graph's inputs, outputs and tables against the manifest, kept for this device's sessions
        for key, entry in manifest.models.items():
            if entry.engine == "onnxruntime":
                verify_entry(bundle_dir, manifest, key, stamps=True)
    except BundleError as exc:
        report.reason = f"FAIL: {exc.one_line()}"
        return report
    graphs = manifest.int8_graphs()
    small_only = not graphs and "fp32" not in manifest.models and "int4" in manifest.models   # pack --target int4
    if small_only:
        graphs = {"int4": manifest.models["int4"]}
    report.graphs = [_describe_graph(e, host) for e in graphs.values()] + [
        _describe_openvino(manifest, e, host) for e in manifest.openvino_graphs().values()]
    texts, report.texts = measured_texts(Path(data) if data is not None else None, max_texts, task)
    if task not in OUTPUT and spec.inputs not in ("questions", "pairs"):
        report.reason = f"FAIL: no fidelity metric for task {task!r} in this edgebert"
        return report
    if not graphs:
        report.reason = "FAIL: the bundle has no INT8 graph to check (re-export with --int8)"
        return report
    packed = "fp32" not in manifest.models     # a one-device bundle: measured against its stored fp32 outputs
    if packed and data is not None:
        report.reason = ("FAIL: this bundle carries no fp32 graph, only fp32 outputs on the built-in held-out "
                         "texts; --data needs the full bundle")
        return report
    try:
        fp32 = None if packed else EdgeSession(bundle_dir, "cpu", "fp32", threads, verify=False, allow_spinning=False)
        int8 = EdgeSession(bundle_dir, "cpu", "int4" if small_only else "int8", threads, verify=False,
                           allow_spinning=False, int8_target=None if small_only else int8_target)
    except EdgebertError as exc:
        report.reason = f"FAIL: {exc.one_line()}"
        return report
    choice = int8.int8_choice
    report.chosen = choice.as_dict()
    accuracy = choice.entry.get_extra("accuracy") or {}
    gated = _gate_count(accuracy, data, spec.inputs)
    if gated is not None:          # the export's gate's own texts: the same graph measures the same here
        max_texts = min(max_texts, gated)
        texts = texts[:max_texts]
        report.texts = {**report.texts, "n": len(texts), "as": "the export gate's"}
    report.export_fidelity = {**{k: v for k, v in accuracy.items() if k in ("metric", "mean", "min", "n", "loss")},
                              "source": (accuracy.get("held_out") or {}).get("source")} if accuracy else None
    # the export's budget, where its gate measured this check's metric (older qa bundles: SQuAD F1 vs gold)
    same_metric = accuracy.get("metric") == spec.metric
    exported = accuracy.get("max_accuracy_loss") if same_metric else None
    budget = max_accuracy_loss if max_accuracy_loss is not None else exported
    report.budget = float(budget if budget is not None else DEFAULT_BUDGETS[task])
    try:
        if packed:
            fidelity, report.texts = measure_against_reference(int8, task, max_texts,
                                                               *read_reference(bundle_dir, manifest))
        else:
            measure = (_measure_answers if spec.inputs == "questions" else
                       _measure_groups if spec.inputs == "pairs" else _measure)
            fidelity, report.speed = measure(fp32, int8, task, texts)
        if "int4" in manifest.models and not packed and spec.inputs in ("texts", "pairs"):
            small_gate = _gate_count(manifest.models["int4"].get_extra("accuracy") or {}, data, spec.inputs)
            report.small = _measure_small(bundle_dir, manifest, fp32, task,
                                          texts[:small_gate] if small_gate else texts, threads)
        if spec.method == "tag" and data is not None and is_conll(data):
            report.entities = _entity_scores({"fp32": fp32, "int8": int8}, Path(data), max_texts)
    except EdgebertError as exc:        # the graphs fail, or give NaN, on this machine
        report.reason = f"FAIL: {exc.one_line()}"
        return report
    report.fidelity = fidelity.as_dict()
    where = f"this {host.kind} CPU"
    graph = "small (int4) graph" if small_only else f"INT8 graph {choice.target!r}"
    summary = (f"{fidelity.metric} {fidelity.mean:.5f}, loss {fidelity.loss:.5f} "
               f"{'<=' if fidelity.within(report.budget) else '>'} budget {report.budget:g}, "
               f"on {fidelity.n} {report.texts['source']} {UNITS[spec.inputs]}")
    if fidelity.within(report.budget):
        report.passed = True
        report.reason = f"PASS: {graph} follows fp32 on {where} ({summary})"
    else:
        report.reason = (f"FAIL: {graph} drifts from fp32 on {where} ({summary}); "
                         + drift_advice(str(choice.target), accuracy, manifest.get_extra("default_precision")))
    return report


def _gate_count(accuracy: dict[str, Any], data, inputs: str) -> int | None:
    """How many of the built-in held-out texts the export's gate measured this graph on (its first N), where it
    measured on them and the check is given no ``--data``; None otherwise (questions, another file, no record).
    Measuring on exactly those texts, batched alike, makes a graph the gate accepted pass ``check`` on the same
    machine: on all 202 the small graph's loss 0.004999 <= 0.005 at export read 0.00512 here."""
    held = accuracy.get("held_out") or {}
    n = held.get("queries" if inputs == "pairs" else "texts") if isinstance(held, dict) else None
    if data is not None or inputs == "questions" or not isinstance(n, int) or n < 1 or held.get("skip"):
        return None
    return n if held.get("source") in (BUILTIN_HELD_OUT, BUILTIN_GROUPS) else None


def _measure_small(bundle_dir: Path, manifest: Manifest, fp32, task: str, texts: list,
                   threads: int | None) -> dict[str, Any]:
    """The small graph's fidelity to fp32 here, against its own export budget (reported; the small graph is
    never the default, so it does not decide the verdict)."""
    from edgebert.runtime.session import EdgeSession

    accuracy = manifest.models["int4"].get_extra("accuracy") or {}
    small = EdgeSession(bundle_dir, "cpu", "int4", threads, verify=False, allow_spinning=False)
    measure = _measure_groups if bundle_task(task).inputs == "pairs" else _measure     # a reranker: query groups
    fidelity, _ = measure(fp32, small, task, texts)
    budget = float(accuracy.get("max_accuracy_loss") or DEFAULT_BUDGETS[task])
    return {**fidelity.as_dict(), "budget": budget, "within_budget": fidelity.within(budget),
            "export": {k: accuracy.get(k) for k in ("mean", "min", "loss", "within_budget")}}


def drift_advice(target: str, accuracy: dict[str, Any], default_precision: dict | None) -> str:
    """What to do about an INT8 graph that misses its budget here, for the graph it is: a target other
    than ``portable`` may be replaced by the portable one; the portable graph is already the most
    accurate recipe, so only fp32, more calibration data or a larger budget are left."""
    serve = ("the bundle already loads fp32 by default (its export's gate missed too)" if default_precision
             else 'serve fp32 here (precision="fp32")')
    if accuracy.get("within_budget") is False and not default_precision:
        serve += "; the export's gate missed its budget too"
    if target != "portable":
        return f"{serve}, or re-export with --target portable"
    return (f"{serve}; or re-export with more calibration data (--calib, --calib-size), or accept more loss "
            "(--max-accuracy-loss)")


def _measure(fp32, int8, task: str, texts: list) -> tuple[Any, dict[str, Any]]:
    """Fidelity of ``int8`` against ``fp32`` and the time each took, batch by batch (interleaved)."""
    pairs = bool(texts) and isinstance(texts[0], tuple)
    rows = fp32.encoder.encode(texts, pairs, truncate=True)
    output = OUTPUT[task]
    tracker = FidelityTracker(task)
    spent = {"fp32": 0.0, "int8": 0.0}
    for idx in length_sorted_batches(rows, BATCH):
        feeds = pad_batch([rows[i] for i in idx], fp32.pad_id)
        outs = {}
        for name, session in (("fp32", fp32), ("int8", int8)):
            t0 = time.perf_counter()
            outs[name] = session.run(feeds, [output])[output]
            spent[name] += time.perf_counter() - t0
        tracker.add_outputs(outs["fp32"], outs["int8"], feeds["attention_mask"])
    return tracker.result(), _speed(spent, len(rows), fp32.threads,
                                    "one pass, batches interleaved, spinning off: a rough figure; edgebert bench "
                                    "measures latency")


def _speed(spent: dict[str, float], n: int, threads: int, note: str) -> dict[str, Any]:
    n = max(n, 1)
    speed = {"fp32_texts_per_s": n / max(spent["fp32"], 1e-9), "int8_texts_per_s": n / max(spent["int8"], 1e-9),
             "int8_speedup": spent["fp32"] / max(spent["int8"], 1e-9), "threads": threads, "note": note}
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in speed.items()}


def _measure_groups(fp32, int8, task: str, groups: list) -> tuple[Any, dict[str, Any]]:
    """``rerank``: each query's passages ordered by the INT8 graph against fp32's order (one batch per query, as the
    export's gate batches them), cut where ``predict`` cuts pairs; timed interleaved."""
    limit = int8.cross_encoder_max_length
    encoder = fp32.encoder.with_max_length(limit)
    tracker = FidelityTracker(task)
    spent = {"fp32": 0.0, "int8": 0.0}
    for group in groups:
        feeds = pad_batch(encoder.encode(group.pairs(), True, truncate=True), fp32.pad_id)
        outs = {}
        for name, session in (("fp32", fp32), ("int8", int8)):
            t0 = time.perf_counter()
            outs[name] = session.run(feeds, ["logits"])["logits"]
            spent[name] += time.perf_counter() - t0
        tracker.add_outputs(outs["fp32"], outs["int8"], feeds["attention_mask"])
    return tracker.result(), _speed(spent, sum(len(g.passages) for g in groups), fp32.threads,
                                    "(query, passage) pairs a second, one query a batch, interleaved, spinning off: "
                                    "a rough figure; edgebert bench measures latency")


def _measure_answers(fp32, int8, task: str, examples: list) -> tuple[Any, dict[str, Any]]:
    """``qa``: the INT8 answers' overlap with the fp32 answers, question batches timed interleaved."""
    tracker = FidelityTracker(task)
    spent = {"fp32": 0.0, "int8": 0.0}
    for i in range(0, len(examples), BATCH):
        chunk = examples[i:i + BATCH]
        got = {}
        for name, session in (("fp32", fp32), ("int8", int8)):
            t0 = time.perf_counter()
            got[name] = session.answer([e.question for e in chunk], [e.context for e in chunk])
            spent[name] += time.perf_counter() - t0
        tracker.add(answer_spans(got["fp32"]), answer_spans(got["int8"]), len(chunk))
    return tracker.result(), _speed(spent, len(examples), fp32.threads,
                                    "questions answered, batches interleaved, spinning off: a rough figure")


def _entity_scores(sessions: dict[str, Any], data: Path, max_texts: int) -> dict[str, Any]:
    """Entity precision / recall / F1 of each session against the gold tags of a CoNLL file, each word
    tagged through ``EdgeSession.tag`` as ``edgebert evaluate`` does (``aggregation="none"``: the label
    of the sub-token that starts the word)."""
    from edgebert.errors import ConfigError
    from edgebert.scores.entities import entity_scores

    sentences = read_conll(data)[:max_texts]
    gold = [list(s.tags) for s in sentences]
    out: dict[str, Any] = {"sentences": len(sentences), "file": str(data)}
    for name, session in sessions.items():
        predicted = tag_sentences(partial(session.tag, aggregation="none", batch_size=BATCH),
                                  [s.words for s in sentences])
        try:
            scores = entity_scores(gold, predicted)
        except ConfigError as exc:        # seqeval is not installed on this device
            return {"note": f"entity F1 not measured: {exc.one_line()}"}
        out[name] = {k: round(scores[k], 5) for k in ("f1", "precision", "recall")}
    return out
