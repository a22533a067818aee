"""``edgebert pipeline``: text -> teacher -> 4-layer student -> validated INT8 bundle -> benchmark report.

One call chains the library stages, each into its own folder under ``out``::

    data/      without --eval-corpus: one held-out split of the corpus shared by every stage
    teacher/   only with --from-scratch: pretrain (MLM + NSP) a 12-layer teacher on the corpus
    student/   distil the teacher into a 4-layer student initialised from its layers: embedding
               distillation (hidden states) for an encoder such as the default all-MiniLM-L6-v2,
               DistilBERT-style MLM distillation for a masked-LM teacher
    calib.txt  held-out text (calibration, INT8 accuracy guard, length mix) unless --calib is given
    bundle/    export the student: fused fp32 + guarded dynamic INT8, validated against PyTorch
    report/    bench the bundle (CPU, CUDA, TensorRT; fp32, INT8) against the fp32 *PyTorch teacher*
    (no folder) with --downstream-data: teacher vs student fp32 vs INT8 on held-out MRPC / SST-2 /
               WikiText-2 (``edgebert.stages.embed_eval``); without it, one summary line says why not
    pipeline.json / pipeline.md   the one-screen summary, every stage's figures, the bench report

``config`` holds the recipes (``demo``: the installed all-MiniLM-L6-v2 on the built-in corpus;
``scratch``: the same from a teacher pretrained here; ``wiki``: WikiText-2, from scratch), ``steps``
the calls into each stage, ``summary`` what a run showed, ``run`` the order.
"""

from edgebert.pipeline.config import PIPELINE_PRESETS, PipelineConfig, build_pipeline_config, installed_teacher  # noqa: F401
from edgebert.pipeline.run import PipelineResult, run_pipeline  # noqa: F401
from edgebert.pipeline.steps import headline_speedups, split_corpus, write_calibration_text  # noqa: F401
