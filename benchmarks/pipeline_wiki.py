"""The checked-in student-vs-teacher report: ``edgebert pipeline --preset wiki`` on WikiText-2, with the
SST-2 dev length mix, copied into ``benchmarks/results/pipeline_wiki/``.

    .venv/bin/python benchmarks/pipeline_wiki.py [--teacher runs/wiki12-teacher] [--out runs/pipeline-wiki]

Without ``--teacher`` it first pretrains the 12-layer x 256 teacher (``--preset wiki-12l``: 1000 steps,
about 35 minutes on 2 idle cores); the same recipe as a separate command:

    edgebert pretrain --preset wiki-12l --corpus ../shared/data/wikitext-2-raw/wiki.valid.raw \\
        --eval-corpus ../shared/data/wikitext-2-raw/wiki.test.raw --out runs/wiki12-teacher

(The checked-in teacher ran the preset's first 400 steps with a 400-step schedule, then
``--resume --max-steps 1000``.) Then: distil a 4-layer student (300 steps), export it (fused fp32 + guarded INT8 with the outlier
split), and bench it against the fp32 PyTorch teacher (batch 1, 8 x seq 16-128 and the SST-2 dev mix).
Target (issue #5): student INT8 >= 5.5x faster than the teacher at batch 1 x seq 128. Run it on an
otherwise idle machine; the report records the load.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", type=Path, help="an existing wiki-12l teacher (skip pretraining)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "pipeline-wiki")
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results" / "pipeline_wiki")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    from edgebert.pipeline import PipelineConfig, run_pipeline

    wiki = DATA / "wikitext-2-raw"
    if not (wiki / "wiki.valid.raw").is_file():
        print(f"error: {wiki} not found (see ../shared/data/README)", file=sys.stderr)
        return 2
    cfg = PipelineConfig.preset("wiki", args.out, corpus=(wiki / "wiki.valid.raw",),
                                eval_corpus=(wiki / "wiki.test.raw",), teacher=args.teacher,
                                from_scratch=args.teacher is None,
                                lengths_from=DATA / "sst2" / "dev.tsv", threads=args.threads)
    run_pipeline(cfg, say=print)
    copy_results(args.out, args.results)
    print(f"wrote {args.results}")
    return 0


def copy_results(run: Path, results: Path) -> None:
    results.mkdir(parents=True, exist_ok=True)
    for name in ("pipeline.json", "pipeline.md", "pipeline.jsonl"):
        shutil.copyfile(run / name, results / name)
    for name in ("report.json", "report.md", "latency.png", "bench.jsonl"):
        shutil.copyfile(run / "report" / name, results / name)


if __name__ == "__main__":
    raise SystemExit(main())
