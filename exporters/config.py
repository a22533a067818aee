"""``ExportConfig``: everything ``export_bundle`` needs, validated when it is built."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgebert.bundle import TASKS
from edgebert.bundle.task_registry import BUNDLE_TASKS, bundle_task, reranker_of, task_of_architecture
from edgebert.errors import ConfigError
from edgebert.quantization.config import INT8_MODES, Fp16Config, Int8Config
from edgebert.quantization.int4 import Int4Config
from edgebert.quantization.targets import target_names
from edgebert.runtime.trt_profile import TrtProfile

MIN_OPSET, MAX_OPSET = 14, 20   # 14: Trilu/etc.; 17: native LayerNormalization; 20: TorchScript max
# the settings that shape only the INT8 graphs (field -> its flag): refused without --int8, never ignored
INT8_SETTINGS = {"int8_mode": "--int8-mode", "int8_targets": "--target", "per_channel": "--per-channel/--per-tensor",
                 "quantize_attention": "quantize_attention", "calib": "--calib", "calib_size": "--calib-size",
                 "gate_size": "--gate-size", "gate_data": "--gate-data", "max_accuracy_loss": "--max-accuracy-loss",
                 "outlier_ratio": "--outlier-ratio", "smooth_alpha": "--smooth-alpha",
                 "activation_scales": "--activation-scales",
                 "int8_embedding_tables": "int8_embedding_tables"}
# the settings that shape only the small graph: refused without --int4
INT4_SETTINGS = {"int4_block_size": "--int4-block", "int4_table_block": "--int4-table-block",
                 "int4_accuracy_level": "--int4-accuracy-level", "int4_algorithm": "--int4-algorithm", "int4_attention": "--int4-attention",
                 "int4_max_accuracy_loss": "--int4-max-accuracy-loss", "int4_rotate": "--[no-]int4-rotate"}
# Read from the task registry (``edgebert.bundle.task_registry``), kept for code that imports them:
# the default task of each architecture (config.json "architectures"), the class each task exports as.
ARCHITECTURE_TASKS = {a: t.name for t in BUNDLE_TASKS for a in t.architectures}
TASK_ARCHITECTURES = {t.name: t.architecture for t in BUNDLE_TASKS}


def default_task(architecture: str) -> str:
    """The task of an architecture; ConfigError for one we cannot export."""
    task = task_of_architecture(architecture)
    if task is None:
        raise ConfigError(f"no export task for architecture {architecture}",
                          f"pass --task ({', '.join(TASKS)}) explicitly")
    return task.name


def model_task(model_dir: Path, architecture: str, num_labels: int) -> str:
    """The task a checkpoint exports as when ``--task`` is not given: its architecture's, except that a
    one-label sequence classifier whose folder states a sentence-transformers CrossEncoder is a ``rerank``
    (``bundle.cross_encoder``); a CrossEncoder of several labels is a pair classifier (``cls``)."""
    task = default_task(architecture)
    reranker = reranker_of(architecture)
    if bundle_task(task).cross_encoder == "stated" and num_labels == 1 and reranker is not None:
        from edgebert.bundle.cross_encoder import read_cross_encoder

        if read_cross_encoder(model_dir, num_labels) is not None:
            return reranker.name
    return task


@dataclass(frozen=True)
class ExportConfig:
    """One ONNX bundle export. ``task=None`` takes the task from the checkpoint's architecture.

    GPU graphs: ``tensorrt`` adds the standard-op TensorRT graph (``fp32-trt``; with ``int8`` also its
    static QDQ S8S8 form, ``int8-trt``), each with the min/opt/max ``trt_profile`` (default
    1x1 / 8x128 / 32xmax_len). ``int8_mode="static"`` means INT8 for TensorRT only: it implies
    ``tensorrt`` and skips the CPU INT8 targets. ``cuda`` adds ``fp32-cuda`` and ``fp16-cuda`` (fused
    with the 1-D mask index: CUDA fp16 runs cuDNN flash attention with it, as measured on an H100).
    """

    model_dir: Path
    out_dir: Path
    overwrite: bool = False                    # replace a bundle an earlier export wrote at out_dir
    task: str | None = None
    opset: int = 17
    max_sequence_length: int | None = None     # None: config.max_position_embeddings
    # INT8
    int8: bool = False
    int8_mode: str = "dynamic"                 # dynamic: CPU integer-op graphs per target | static: QDQ (TensorRT)
    int8_targets: tuple[str, ...] = ("portable",)   # quantization.targets; the first is the default graph
    per_channel: bool | None = None            # None: the target recipe's (per-channel)
    quantize_attention: bool = True            # dynamic: Attention -> QAttention
    calib: Path | None = None                  # None: the built-in English text
    calib_size: int = 256
    gate_size: int | None = None               # None: 200 held-out texts, or every built-in question (qa)
    gate_data: Path | None = None              # qa: a SQuAD file of questions not trained on, for the gate
    max_accuracy_loss: float | None = None     # None: the task's default budget (the gate is always on)
    outlier_ratio: float | None = None         # None: the recipe's (3); 0: no outlier split
    smooth_alpha: float | None = None          # None: the recipe's (0.75); 0: no smoothing scales
    activation_scales: str | None = None       # None: the recipe's (calibrated); per-call: dynamic
    int8_embedding_tables: bool | None = None  # None: the recipe's (int8 per row); False: tables stay fp32
    # the small graph (int4: 4-bit MatMuls + word table, gated like INT8; quantization.int4); needs int8
    int4: bool = False
    int4_block_size: int | None = None         # None: the block a --int4-aware student trained at, else 32
    int4_table_block: int | None = None        # the word table's values per scale; None: int4_block_size's
    int4_accuracy_level: int = 4
    int4_algorithm: str = "gptq"               # rtn | gptq (calibrated, rtn's grid and kernel) | hqq
    int4_attention: str = "split"              # split: QKV 4-bit candidates (MultiHeadAttention) | packed
    int4_max_accuracy_loss: float | None = None   # None: the INT8 budget (max_accuracy_loss, else the task's)
    int4_rotate: bool | None = None            # 4-bit inputs rotated first (quantization.rotate_inputs); None: yes,
                                               # but not for a --int4-aware student (trained on the unrotated grid)
    # a domain vocabulary (exporters.vocab_prune): keep the word pieces this text file uses (+ characters)
    vocab_from: Path | None = None
    # FP16
    fp16: bool = False
    fp16_tolerance: float = 2e-2
    # GPU graphs
    tensorrt: bool = False                     # standard-op TensorRT graph(s), with trt_profile
    trt_profile: TrtProfile | str | None = None   # "min=1x1,opt=8x128,max=32x512"; None: TrtProfile.default
    cuda: bool = False                         # fused-gpu CUDA graphs (fp32 + fp16, 1-D mask index)
    ort_format: bool = False                   # also the CPU graphs as onnxruntime .ort + required_operators.config
    # validation of every graph against the PyTorch reference
    fp32_tolerance: float = 1e-4
    validation_batch_sizes: tuple[int, ...] = (1, 3, 8)
    validation_seq_lens: tuple[int | None, ...] = (7, 64, None)   # None: max_sequence_length
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_dir", Path(self.model_dir))
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        if self.task is not None and self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r}", f"use one of {', '.join(TASKS)}")
        if not isinstance(self.opset, int) or not MIN_OPSET <= self.opset <= MAX_OPSET:
            raise ConfigError(f"opset {self.opset!r} is outside {MIN_OPSET}..{MAX_OPSET}",
                              "17 is the default and what the fusion gate is verified on")
        if self.int8_mode not in INT8_MODES:
            raise ConfigError(f"unknown INT8 mode {self.int8_mode!r}", f"use one of {', '.join(INT8_MODES)}")
        object.__setattr__(self, "int8_targets", target_names(self.int8_targets))
        if not self.int8:
            self._check_no_int8_settings()
        if self.int8 and self.int8_mode == "static":
            object.__setattr__(self, "tensorrt", True)       # static QDQ INT8 is TensorRT's graph
        if isinstance(self.trt_profile, str):
            object.__setattr__(self, "trt_profile", TrtProfile.parse(self.trt_profile))
        if self.trt_profile is not None and not self.tensorrt:
            raise ConfigError("--trt-profile shapes the TensorRT graphs, which need --tensorrt", "add --tensorrt")
        if self.trt_profile is not None and self.max_sequence_length is not None and \
                self.trt_profile.max[1] > self.max_sequence_length:
            raise ConfigError(f"the TensorRT profile's max sequence {self.trt_profile.max[1]} exceeds the max "
                              f"sequence length {self.max_sequence_length}", "lower --trt-profile max")
        if self.max_sequence_length is not None and (
                not isinstance(self.max_sequence_length, int) or self.max_sequence_length < 8):
            raise ConfigError(f"max_sequence_length={self.max_sequence_length!r} must be an integer >= 8")
        if self.model_dir.resolve() == self.out_dir.resolve():
            raise ConfigError("--out must differ from MODEL_DIR", "the bundle replaces --out as a whole")
        if not self.fp32_tolerance > 0:
            raise ConfigError(f"fp32 tolerance {self.fp32_tolerance!r} must be > 0")
        if not self.validation_batch_sizes or any(b <= 0 for b in self.validation_batch_sizes):
            raise ConfigError("validation batch sizes must be positive")
        if self.int4 and not (self.int8 and self.int8_mode == "dynamic"):
            raise ConfigError("the small (int4) graph is gated on the INT8 feeds and made for the CPU",
                              "add --int8 (dynamic mode) to --int4")
        if self.int4:
            self.int4_config()
        if self.vocab_from is not None:
            object.__setattr__(self, "vocab_from", Path(self.vocab_from))
            if not self.vocab_from.is_file():
                raise ConfigError(f"--vocab-from corpus {self.vocab_from} not found",
                                  "give a text file of the domain's texts, one per line")
            if self.task is not None and bundle_task(self.task).outputs_vocabulary:
                raise ConfigError("--vocab-from changes the token ids a fill-mask model predicts",
                                  "drop --vocab-from for --task mlm")
        if not self.int4:
            self._check_unused(INT4_SETTINGS, "a 4-bit", "--int4")
        if self.int8:
            self.int8_config()   # validates the INT8 combination (static needs --calib, ...)
        if self.fp16:
            self.fp16_config()

    def _check_no_int8_settings(self) -> None:
        """Without ``int8`` no INT8 setting may differ from its default: it would be silently unused."""
        self._check_unused(INT8_SETTINGS, "an INT8", "--int8")

    def _check_unused(self, settings: dict[str, str], one: str, flag: str) -> None:
        """No setting of ``settings`` may differ from its default without ``flag`` (``one``: "an INT8")."""
        kind = one.split(" ", 1)[1]
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name in settings}
        given = [option for name, option in settings.items() if getattr(self, name) != defaults[name]]
        if given:
            listed = ", ".join(given)
            raise ConfigError(f"{listed} {f'is {one} setting' if len(given) == 1 else f'are {kind} settings'}, "
                              f"and {kind} settings need {flag}", f"add {flag}, or drop {listed}")

    def int4_config(self) -> Int4Config:
        """The small graph's settings (validated by ``Int4Config``); its budget: ``int4_max_accuracy_loss``, else INT8's
        (a tight INT8 budget can leave no room for 4 bits: give the small graph its own). The block:
        ``int4_block_size``, else the one a ``distill --int4-aware`` student trained at (its ``distill_config.json``:
        exported at another block, its rounding would not be the trained one), else 32. Rotation: ``int4_rotate``,
        else on unless the model is such a student (it learned to be robust to the unrotated weights' rounding)."""
        trained = trained_int4_block(self.model_dir)
        block = self.int4_block_size if self.int4_block_size is not None else (trained or 32)   # 0 is refused, not 32
        rotate = self.int4_rotate if self.int4_rotate is not None else trained is None
        table = self.int4_table_block if self.int4_table_block is not None else block
        return Int4Config(block_size=block, accuracy_level=self.int4_accuracy_level, algorithm=self.int4_algorithm,
                          attention=self.int4_attention, table_block=table,
                          max_accuracy_loss=self.int4_max_accuracy_loss, rotate=rotate)

    def int8_config(self, max_len: int | None = None) -> Int8Config:
        """The INT8 settings; with ``max_len``, calibration and gate texts are cut to fit the model's positions."""
        op_types = None
        if self.int8_mode == "dynamic" and not self.quantize_attention:
            op_types = ("MatMul",)
        qcfg = Int8Config(mode=self.int8_mode, targets=self.int8_targets, per_channel=self.per_channel,
                          op_types=op_types, calib=self.calib, calib_size=self.calib_size, gate_size=self.gate_size,
                          gate_data=self.gate_data,
                          max_accuracy_loss=self.max_accuracy_loss, outlier_ratio=self.outlier_ratio,
                          smooth_alpha=self.smooth_alpha, activation_scales=self.activation_scales, embedding_tables=self.int8_embedding_tables)
        if max_len is not None and qcfg.calib_seq_len > max_len:
            qcfg = qcfg.replace(calib_seq_len=max_len)
        if max_len is not None:              # the gate measures held-out texts as the runtime and check cut them
            qcfg = qcfg.replace(gate_seq_len=max_len)
        return qcfg

    def fp16_config(self) -> Fp16Config:
        return Fp16Config(tolerance=self.fp16_tolerance)

    def tensorrt_profile(self, max_len: int) -> TrtProfile:
        """The TensorRT profile of this export (``ConfigError`` if it does not fit ``max_len``)."""
        profile = self.trt_profile or TrtProfile.default(max_len)
        if profile.max[1] > max_len:
            raise ConfigError(f"the TensorRT profile's max sequence {profile.max[1]} exceeds the model's max "
                              f"sequence length {max_len}", f"use --trt-profile with a max sequence <= {max_len}")
        return profile

    def replace(self, **changes: Any) -> "ExportConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, model_dir: str | Path, out_dir: str | Path, **overrides: Any) -> "ExportConfig":
        if name not in EXPORT_PRESETS:
            raise ConfigError(f"unknown export preset {name!r}", f"use one of {', '.join(EXPORT_PRESETS)}")
        return cls(model_dir=Path(model_dir), out_dir=Path(out_dir), **{**EXPORT_PRESETS[name], **overrides})


EXPORT_PRESETS: dict[str, dict[str, Any]] = {
    "fp32": {},
    "cpu-int8": dict(int8=True, int8_mode="dynamic"),
    "cpu-fleet": dict(int8=True, int8_mode="dynamic", int8_targets=("portable", "x86-vnni")),
    "gpu-fp16": dict(fp16=True),
    # TensorRT only: the standard-op graph and its static QDQ S8S8 INT8 form (no CPU INT8 graphs)
    "tensorrt": dict(int8=True, int8_mode="static", tensorrt=True),
    # every provider: CPU INT8 (portable), TensorRT fp32 + QDQ INT8, CUDA fp32 + fp16
    "gpu": dict(int8=True, tensorrt=True, cuda=True),
}


def trained_int4_block(model_dir: Path) -> int | None:
    """The ``int4_block`` a ``distill --int4-aware`` student records in its ``distill_config.json`` (None: none)."""
    import json

    path = Path(model_dir) / "distill_config.json"
    try:
        block = json.loads(path.read_text(encoding="utf-8")).get("int4_block") if path.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None
    return block if isinstance(block, int) and not isinstance(block, bool) else None
