"""The GPU acceptance check (``benchmarks/gpu_paths.py`` runs it): every GPU provider x precision really
runs where it says, gives the CPU's answers, and never falls back in silence; then the bench's GPU paths
get the same scrutiny.

A path passes when the session asked for provider P reports P, onnxruntime's node placement gives P
nodes, nothing was printed on stdout (onnxruntime prints "EP Error ... Falling back" there when it
reroutes), its embeddings match the CPU fp32 ones (cosine per text, per-precision floor), and, on
TensorRT, a batch above the profile is refused. A provider the probe says this machine cannot run is
"unmeasured" with the probe's reason; a provider that probes fine and then fails is a failure. The
bench report gets the same scrutiny (``bench_problems``). ``run_gpu_check`` does it all on a bundle
and writes gpu_check.json, gpu_check.md and the bench report. Torch-free (the bench's PyTorch reference
imports torch when one is given).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from edgebert.bench.schema import BenchReport
from edgebert.errors import ConfigError, EdgebertError
from edgebert.runtime.placement import HYBRID

GPU_PROVIDERS = ("cuda", "tensorrt")
PRECISIONS = ("fp32", "fp16", "int8")
# lowest cosine (per text) against the CPU fp32 embedding that a path may give
COSINE_FLOOR = {"fp32": 0.9999, "fp16": 0.999, "int8": 0.98}
OK, FAILED, UNMEASURED, HYBRID_PATH = "ok", "FAILED", "unmeasured", "hybrid"


def session_problems(session: Any, requested: str, stdout: str) -> list[str]:
    """Why a session asked for ``requested`` is not honestly running there (empty: it is)."""
    problems = []
    if session.provider != requested:
        problems.append(f"asked for {requested}, the session runs on {session.provider} (silent fallback)")
    if not session.placement.runs_on(requested):
        problems.append(f"onnxruntime assigned no node to {requested} ({session.placement.describe()})")
    elif session.placement.label(requested) == HYBRID:
        off = ", ".join(f"{op} {n}" for op, n in session.placement.compute_off(requested).items())
        problems.append(f"hybrid: compute nodes on the CPU, not {requested} ({off})")
    if stdout.strip():
        problems.append(f"onnxruntime printed on stdout (a rerouted session?): {' '.join(stdout.split())[:300]}")
    return problems


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)


def _profile_refusal(session: Any) -> str | None:
    """TensorRT: a batch one above the profile must raise ``ConfigError`` before onnxruntime is called."""
    profile = session.trt_profile
    ids = np.ones((profile.max[0] + 1, min(8, profile.max[1])), np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    try:
        session.run(feeds)
    except ConfigError:
        return None
    return f"batch {ids.shape[0]} (above the profile's max {profile.max[0]}) was run instead of refused"


def check_path(open_session: Any, provider: str, precision: str, texts: Sequence[str],
               reference: np.ndarray, probe: Any) -> dict[str, Any]:
    """One provider x precision: ``open_session(provider=, precision=)`` -> an ``EdgeSession``."""
    row: dict[str, Any] = {"provider": provider, "precision": precision}
    status = probe(provider)
    if not status.available:
        return {**row, "status": UNMEASURED, "reason": status.reason}
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            session = open_session(provider=provider, precision=precision)
            embeddings = session.embed(list(texts))
    except EdgebertError as exc:
        return {**row, "status": FAILED, "problems": [f"probe says available, but: {exc.one_line()}"],
                "stdout": printed.getvalue()[:2000]}
    except Exception as exc:  # noqa: BLE001  (any other failure is this path's, never the whole check's)
        return {**row, "status": FAILED, "problems": [f"probe says available, but {type(exc).__name__}: "
                                                      f"{' '.join(str(exc).split())[:400]}"],
                "stdout": printed.getvalue()[:2000]}
    problems = session_problems(session, provider, printed.getvalue())
    cosine = cosine_rows(embeddings, reference)
    if cosine.min() < COSINE_FLOOR[precision]:
        problems.append(f"cosine to the CPU fp32 embeddings {cosine.min():.5f} < {COSINE_FLOOR[precision]}")
    if provider == "tensorrt" and session.trt_profile is not None:
        refusal = _profile_refusal(session)
        if refusal:
            problems.append(refusal)
    hybrid = bool(problems) and all(p.startswith("hybrid:") for p in problems)
    return {**row, "status": HYBRID_PATH if hybrid else FAILED if problems else OK, "problems": problems, "model": session.model_key,
            "model_file": session.model_file.name, "providers": list(session.providers),
            "placement": session.placement.as_dict(), "notes": list(session.provider_notes),
            "trt_profile": session.trt_profile.as_dict() if session.trt_profile else None,
            "texts": len(texts), "cosine_min": round(float(cosine.min()), 6),
            "cosine_mean": round(float(cosine.mean()), 6)}


def bench_problems(report: BenchReport | dict[str, Any]) -> list[str]:
    """Silent fallbacks and failures in a bench report: a GPU path that ran elsewhere, gave no node to its
    provider, failed, or a result row whose provider is not its path's."""
    from edgebert.runtime.providers import short_name

    report = BenchReport.of(report)
    problems = []
    for path in report.paths:
        if path.provider not in GPU_PROVIDERS or not path.available:
            continue
        ran_on = path.providers[0] if path.providers else "no provider"
        if short_name(ran_on) != path.provider:
            problems.append(f"bench {path.path}: runs on {ran_on}")
        nodes = (path.placement or {}).get("nodes") or {}
        if not nodes.get(path.provider):
            problems.append(f"bench {path.path}: no node assigned to {path.provider} ({nodes})")
        elif path.precision == "int8" and path.provider == "cuda" and nodes.get("cpu"):
            problems.append(f"bench {path.path}: hybrid, {nodes.get('cpu')} node(s) on the CPU ({nodes})")
        if path.failed:
            problems.append(f"bench {path.path}: {path.failed}")
    for row in report.results:
        words = row.path.split()
        if words[0] == "onnx" and words[1] != row.provider:
            problems.append(f"bench {row.path} b={row.batch} s={row.seq}: timed on {row.provider}")
    return problems


def verdict(rows: list[dict[str, Any]], bench: list[str]) -> tuple[int, str]:
    """(exit code, one line): 0 every path ran honestly, 1 any failure (silent fallback, wrong answers, a
    session that probes fine but fails), 3 nothing failed but some paths could not be measured here."""
    failed = [f"{r['provider']} {r['precision']}" for r in rows if r["status"] == FAILED]
    gaps = [f"{r['provider']} {r['precision']}" for r in rows if r["status"] == UNMEASURED]
    if failed or bench:
        return 1, f"FAILED: {', '.join(failed) or 'bench'} ({len(bench)} bench problem(s))"
    if gaps:
        return 3, f"no failure, but unmeasured here: {', '.join(gaps)} (reasons in the report)"
    ran = ", ".join(f"{r['provider']} {r['precision']}" for r in rows)
    return 0, f"every path ran on its provider: {ran}"


def to_markdown(check: dict[str, Any]) -> str:
    env = check["environment"]
    out = ["# GPU check", "", f"- verdict: {check['verdict']}", f"- GPU: {env['gpu_summary']}",
           f"- onnxruntime {env['onnxruntime']} ({env['onnxruntime_package']}, device {env['onnxruntime_device']}, "
           f"providers in the build: {', '.join(env['onnxruntime_providers'])})",
           f"- torch {env.get('torch')} (CUDA {env.get('torch_cuda')})", f"- bundle: `{check['bundle']}`",
           f"- bench report: `{check.get('bench_report') or 'not run'}`", "",
           "| provider | precision | status | graph | nodes on provider | cosine min vs CPU fp32 | why |",
           "|---|---|---|---|---|---:|---|"]
    for r in check["runtime"]:
        placement = r.get("placement") or {}
        nodes = placement.get("nodes") or {}
        share = f"{nodes.get(r['provider'], 0)} of {placement.get('total')}" if placement else "-"
        why = r.get("reason") or "; ".join(r.get("problems") or []) or "-"
        cos = f"{r['cosine_min']:.5f}" if "cosine_min" in r else "-"
        out.append(f"| {r['provider']} | {r['precision']} | {r['status']} | {r.get('model', '-')} | {share} | "
                   f"{cos} | {why} |")
    if check["bench_problems"]:
        out += ["", "## Bench problems", ""] + [f"- {p}" for p in check["bench_problems"]]
    return "\n".join(out) + "\n"


def environment(status: dict[str, Any]) -> dict[str, Any]:
    """What the check runs on: GPU facts, the onnxruntime build, torch (``status``: provider -> probe)."""
    import importlib.metadata as md

    import onnxruntime as ort

    from edgebert.bench.gpu import Nvml, gpu_environment, gpu_summary

    gpu = gpu_environment(Nvml())
    packages = [name for name in ("onnxruntime-gpu", "onnxruntime") if _installed(md, name)]
    env = {"gpu": gpu, "gpu_summary": gpu_summary(gpu), "onnxruntime": ort.__version__,
           "onnxruntime_package": " + ".join(packages) or "unknown", "onnxruntime_device": ort.get_device(),
           "onnxruntime_providers": ort.get_available_providers(),
           "providers": {k: v.as_dict() for k, v in status.items()}}
    try:
        import torch

        env["torch"], env["torch_cuda"] = torch.__version__, torch.version.cuda
    except ImportError:
        env["torch"] = env["torch_cuda"] = None
    return env


def _installed(md, name: str) -> bool:
    try:
        md.version(name)
    except md.PackageNotFoundError:
        return False
    return True


def run_gpu_check(bundle: Path, out: Path, texts: Sequence[str], status: dict[str, Any], *,
                  reference: Path | None = None, lengths_from: Path | None = None, quick: bool = False,
                  command: str = "") -> tuple[int, str]:
    """The whole check on ``bundle`` (``status``: provider -> probe, of cuda and tensorrt): every provider x
    precision through ``EdgeSession`` against the CPU fp32 embeddings of ``texts``, then the ``gpu`` bench
    preset (``reference``: the PyTorch model, ``lengths_from``: the length mix) into ``out/bench``, its
    paths checked the same way; writes ``out/gpu_check.json`` and ``gpu_check.md``. Returns ``verdict``."""
    from rich.console import Console

    from edgebert.bench.config import BenchConfig
    from edgebert.bench.report import print_report
    from edgebert.bench.runner import measure
    from edgebert.files.atomic import write_json, write_text
    from edgebert.runtime import EdgeSession, probe

    env = environment(status)
    cpu = EdgeSession(bundle, provider="cpu", precision="fp32").embed(list(texts))
    cache = out / "tensorrt_cache"

    def open_session(provider: str, precision: str) -> EdgeSession:
        return EdgeSession(bundle, provider=provider, precision=precision, trt_cache_dir=cache)

    rows = []
    for p in status:
        for q in PRECISIONS:
            rows.append(check_path(open_session, p, q, texts, cpu, probe))
            write_json(out / "gpu_check.json", {"verdict": "in progress: runtime paths", "environment": env,
                                                "runtime": rows, "command": command})   # kept if the run dies
    for r in rows:
        print(f"{r['provider']:9s} {r['precision']:5s} {r['status']:10s} "
              f"{r.get('reason') or '; '.join(r.get('problems') or []) or r.get('model')}")
    providers = tuple(p for p, s in status.items() if s.available)
    extra = dict(iters=10, warmup=2, max_seconds=2.0, max_texts=200) if quick else {}
    config = BenchConfig.preset("gpu", bundle, providers=providers, reference=reference, lengths_from=lengths_from,
                                report_dir=out / "bench", **extra)
    report = measure(config)
    print_report(report, Console(width=160))
    problems = bench_problems(report)
    code, line = verdict(rows, problems)
    check = {"verdict": line, "exit_code": code, "environment": env, "bundle": str(bundle), "texts": len(texts),
             "runtime": rows, "bench_problems": problems, "bench_report": str(out / "bench" / "report.json"),
             "command": command}
    write_json(out / "gpu_check.json", check)
    write_text(out / "gpu_check.md", to_markdown(check))
    return code, line
