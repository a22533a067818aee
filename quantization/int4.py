"""The "small" graph: below one byte per parameter, gated on held-out accuracy like INT8.

From the fused fp32 graph:

1. the encoder's weight MatMuls (feed-forward, attention output, pooler) become onnxruntime's
   ``MatMulNBits``: 4-bit weights in blocks of ``block_size`` along K, symmetric, one float scale per block
   (``MatMulNBitsQuantizer``; ``algorithm="rtn"`` rounds (onnxruntime's fast CPU kernel), ``"gptq"`` rounds
   on the same grid calibrated on the INT8 calibration text (``quantization.gptq``: same bytes, same kernel,
   half the loss on MiniLM), ``"hqq"``
   (more accurate, but its float zero points and missing ``accuracy_level`` send onnxruntime 1.32's CPU kernel to
   a slow path: 16 ms against 0.76 ms per MiniLM call of 7 tokens) fits scales and zero points by
   half-quadratic optimisation), run with ``accuracy_level`` (4: int8 activations per block);
   With ``attention="split"`` (the default) each fused ``Attention`` node is first split into its query, key
   and value MatMuls feeding ``MultiHeadAttention`` (``quantization.split_attention``: onnxruntime has no
   4-bit form of the packed QKV weight), so those projections are candidates too; ``"packed"`` keeps the
   fused node (8-bit ``QAttention``). With ``rotate`` (the export's default) the candidates' inputs are then
   rotated (``quantization.rotate_inputs``: a float-equivalent graph, checked, whose weights' outlier rows are spread thin),
   so GPTQ and the gate work on the rotated weights;
2. every MatMul the gate keeps off 4 bits (and a packed ``Attention``) become dynamic INT8 with 8-bit
   per-channel weights. So a graph with such parts needs exact
   U8S8 products (``requires.u8s8_exact``), and the runtime applies ``int8_choice``'s rules to it: exact
   hosts run it as it is, a saturating AVX2 CPU loads it with ``session.x64quantprecision=1`` or refuses it.
   A graph with every candidate 4-bit has no U8S8 product left (``MatMulNBits`` quantizes its activations per
   block to int8 and multiplies them in its own kernels: within 5e-5 of a VNNI CPU under AVX2 emulation), so it says
   ``u8s8_exact: false`` and loads as it is on any CPU;
   7-bit weights (``reduce_range``, which cannot saturate) lost 0.009 of MiniLM's cosine on their own, most of
   a 0.01 budget, and left no room for a 4-bit table: 8-bit weights brought the gated graph from 22.9 to 16.6 MB
   (benchmarks/results/int4/README.md);
3. the ELN word table becomes 4-bit per block (``quantization.int4_tables``, ``GatherBlockQuantized``).

The gate (``quantization.accuracy.quantize_with_guard``) ranks each 4-bit candidate (each MatMul, the word
table) by the loss it alone causes per byte its 4 bits save (``Int4Quantizer.bytes_saved``: on MiniLM the word
table loses 0.0012 alone but is half the 4-bit savings, so ranking by loss alone kept it 8-bit first), and
keeps the highest ranked ones 8-bit until the budget is met; a graph
still over budget with every candidate 8-bit is written and marked ``within_budget: false`` (the runtime
never picks it by default). Nothing here compares with PyTorch: the exporter validates the written graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import onnx
from onnx import numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from edgebert.errors import ConfigError
from edgebert.files.atomic import work_dir
from edgebert.graph.ops import load, op_type_counts, quiet_logging, weight_nodes
from edgebert.quantization.accuracy import AccuracyProbe, GateOrder, GuardResult, quantize_with_guard
from edgebert.quantization.activations import Feeds
from edgebert.quantization.embedding_tables import quantize_tables, table_plan
from edgebert.quantization.gemm_matmul import gemms_to_matmuls
from edgebert.quantization.gptq import gptq_weights
from edgebert.quantization.int4_tables import WORD, quantize_word_table, word_table
from edgebert.quantization.rotate_inputs import rotate_inputs, rotation_nodes
from edgebert.quantization.split_attention import split_attention
from edgebert.quantization.storage import compact_storage

ALGORITHMS = ("rtn", "gptq", "hqq")      # gptq: calibrated, on rtn's grid (quantization.gptq)
ATTENTION = ("split", "packed")       # QKV as three 4-bit candidate MatMuls, or the fused node's 8-bit weight
ACCURACY_LEVELS = (0, 1, 2, 3, 4)     # MatMulNBits: 0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8 activations
TABLE = "word_table"                  # the gate's candidate name of the ELN word table
REQUIREMENTS = {"onnxruntime": ">= 1.20 (GatherBlockQuantized with bits=4)"}
U8S8_OPS = ("MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QAttention", "QGemm",
            "QLinearMatMul")          # the ops whose uint8 x int8 products an AVX2 kernel can saturate


@dataclass(frozen=True)
class Int4Config:
    """How the small graph is made. ``block_size``: MatMul weights per scale along K (32 measured best on
    all-MiniLM-L6-v2: 0.977 mean cosine RTN at block 32, benchmarks/results/int4); ``table_block``: the word table's
    values per scale; ``word_table``: 4-bit table on/off; ``attention``: ``split`` (QKV projections are 4-bit
    candidates) or ``packed`` (the fused node, 8-bit); ``max_accuracy_loss``: None, the INT8 budget;
    ``algorithm``: ``rtn`` here, ``gptq`` needs calibration feeds (the export's default, which has them);
    ``rotate``: the 4-bit candidates' inputs rotated first (``quantization.rotate_inputs``; the export's default)."""
    block_size: int = 32
    accuracy_level: int = 4
    algorithm: str = "rtn"
    word_table: bool = True
    table_block: int = 32
    attention: str = "split"
    max_accuracy_loss: float | None = None
    rotate: bool = False

    def __post_init__(self) -> None:
        for name, option in (("block_size", "--int4-block"), ("table_block", self._table_option)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 16 or value & (value - 1):
                raise ConfigError(f"{option} {value!r} is not a power of two >= 16", "use 16, 32, 64 or 128")
        if self.accuracy_level not in ACCURACY_LEVELS:
            raise ConfigError(f"unknown MatMulNBits accuracy_level {self.accuracy_level}",
                              f"use one of {', '.join(map(str, ACCURACY_LEVELS))} (4: int8 activations)")
        if self.attention not in ATTENTION:
            raise ConfigError(f"unknown 4-bit attention form {self.attention!r}", f"use one of {', '.join(ATTENTION)}")
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"unknown 4-bit algorithm {self.algorithm!r}", f"use one of {', '.join(ALGORITHMS)}")
        if self.max_accuracy_loss is not None and not 0 <= self.max_accuracy_loss < 1:
            raise ConfigError(f"4-bit max_accuracy_loss {self.max_accuracy_loss} is outside [0, 1)",
                              "give the task metric's loss, e.g. 0.01 for 1 - mean cosine")

    @property
    def _table_option(self) -> str:
        """The option that set the word table's block: its own, or --int4-block's it defaults to."""
        return "--int4-block" if self.table_block == self.block_size else "--int4-table-block"

    def check_width(self, hidden: int) -> None:
        """Before any graph is made: the 4-bit word table's block must divide the hidden size (a MatMul whose K
        the block does not divide just stays 8-bit); ``ConfigError`` naming the option and the blocks that would."""
        if self.word_table and hidden % self.table_block:
            fits = [b for b in (16, 32, 64, 128) if hidden % b == 0]
            option = self._table_option
            raise ConfigError(f"{option} {self.table_block} does not divide this model's hidden size {hidden} "
                              "(the 4-bit word table is stored in blocks of a row)",
                              f"use {option} {' or '.join(map(str, fits))}" if fits else
                              "no 4-bit block (16..128) divides this width: export --int8 without --int4")

    def as_dict(self) -> dict[str, Any]:
        return {"bits": 4, "block_size": self.block_size, "accuracy_level": self.accuracy_level,
                "algorithm": self.algorithm, "symmetric": self.algorithm != "hqq", "word_table": self.word_table,
                "table_block": self.table_block, "attention": self.attention, "rotate": self.rotate}


class Int4Quantizer:
    """The gate's quantizer (``accuracy.Quantizer``): candidates are the 4-bit MatMuls and the word table;
    ``exclude`` keeps candidates 8-bit; ``only`` makes that one candidate 4-bit and leaves the rest fp32
    (the sensitivity ranking's one-at-a-time graph)."""

    def __init__(self, fused: str | Path, cfg: Int4Config, split: int = 0,
                 calibration: Callable[[], Iterable[Feeds]] | None = None,
                 say: Callable[[str], None] = lambda _: None, rotation: dict | None = None):
        self.source, self.cfg, self.split = Path(fused), cfg, split      # split: Attention nodes split before
        self.rotation = rotation                                      # rotate_inputs' record, when rotated before
        self.float_nodes = rotation_nodes(self.source)              # the rotation's own MatMuls stay float
        self.shapes = _blockable(self.source, cfg.block_size)       # {MatMul: (K, N)}
        self.matmuls = list(self.shapes)
        self.gptq: dict[str, Any] | None = None
        self.rounded: dict[str, Any] = {}                            # gptq: {MatMul: its rounded [K, N] weight}
        if cfg.algorithm == "gptq":
            if calibration is None:
                raise ConfigError("--int4-algorithm gptq needs calibration texts", "export with --int8 (its "
                                  "calibration text) or use --int4-algorithm rtn")
            self.rounded, self.gptq = gptq_weights(self.source, self.matmuls, cfg.block_size, calibration, say)
        self.word = word_table(self.source)
        self.table = [TABLE] if cfg.word_table and self.word is not None else []
        self.last_tables: dict | None = None
        self.last_storage: dict | None = None

    def candidates(self) -> list[str]:
        return [*self.matmuls, *self.table]

    def bytes_saved(self, candidate: str) -> int:
        """The bytes that making ``candidate`` 4-bit saves against keeping it 8-bit, as stored: a MatMul's int8
        weight [K, N] with a float scale and int8 zero point per column, against K*N/2 packed values and a float
        scale per block (HQQ: plus a packed 4-bit zero point per block), the scales stored float16 in both
        (``quantization.storage``), the 8-bit zero points dropped (all zero); the word table's int8 rows with a
        float16 scale per row, against packed values, a float16 scale and a 4-bit zero point per block."""
        if candidate == TABLE and self.word is not None:
            rows, hidden = self.word.rows, self.word.hidden
            blocks = hidden // self.cfg.table_block
            return rows * (hidden + 2) - rows * (hidden // 2 + 2 * blocks + (blocks + 1) // 2)
        if candidate not in self.shapes:
            raise ConfigError(f"{candidate!r} is not a 4-bit candidate of this graph",
                              "name one of Int4Quantizer.candidates()")
        k, n = self.shapes[candidate]
        blocks = k // self.cfg.block_size
        four = k * n // 2 + blocks * n * 2 + (blocks * n + 1) // 2 * (self.cfg.algorithm == "hqq")
        return k * n + n * 2 - four

    def quantize(self, out_path: str | Path, exclude: list[str] | tuple[str, ...] = (),
                 only: str | None = None) -> Path:
        four = [n for n in self.matmuls if n not in exclude and only in (None, n)]
        with work_dir("q4") as tmp:
            current = self.source
            if four and self.rounded:       # gptq: its values, which the symmetric rounding keeps as they are
                current = _with_weights(current, Path(tmp) / "gptq.onnx", {n: self.rounded[n] for n in four})
            if four:
                current = self._nbits(current, Path(tmp) / "nbits.onnx", four)
            if only is None:
                eight = Path(tmp) / "eight.onnx"
                with quiet_logging():
                    quantize_dynamic(str(current), str(eight), op_types_to_quantize=["MatMul", "Attention"],
                                     nodes_to_exclude=self.float_nodes, per_channel=True, reduce_range=False, weight_type=QuantType.QInt8,
                                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT,
                                                    "MatMulConstBOnly": True})
                current = eight
            four_table = bool(self.table) and TABLE not in exclude and only in (None, TABLE)
            if only is None:        # the other tables int8 per row, as the INT8 graph has them
                int8_tables = [t.candidate for t in table_plan(current)[0] if not (four_table and t.slot == WORD)]
                self.last_tables = quantize_tables(current, Path(tmp) / "tables.onnx", int8_tables)
                current = Path(tmp) / "tables.onnx"
            if four_table:
                self.last_tables = {**(self.last_tables or {}),
                                    WORD: quantize_word_table(current, out_path, self.cfg.table_block)}
            else:
                onnx.save(load(current), str(out_path))
        if only is None:
            self.last_storage = compact_storage(out_path)
        return Path(out_path)

    def _nbits(self, src: Path, dst: Path, nodes: list[str]) -> Path:
        from onnxruntime.quantization.matmul_nbits_quantizer import (
            DefaultWeightOnlyQuantConfig,
            HQQWeightOnlyQuantConfig,
            MatMulNBitsQuantizer,
        )
        c = self.cfg
        if c.algorithm == "hqq":
            algo = HQQWeightOnlyQuantConfig(block_size=c.block_size, bits=4)
        else:
            algo = DefaultWeightOnlyQuantConfig(block_size=c.block_size, is_symmetric=True,
                                                accuracy_level=c.accuracy_level, bits=4)
        model = load(src)
        # nodes_to_include widens op_types_to_quantize (a name in it OR a MatMul), it does not narrow it: the
        # MatMuls that stay off 4 bits are named in nodes_to_exclude
        others = [n.name for n in model.graph.node if n.op_type == "MatMul" and n.name not in set(nodes)]
        with quiet_logging():
            q = MatMulNBitsQuantizer(model, bits=4, block_size=c.block_size, is_symmetric=True,
                                     accuracy_level=c.accuracy_level, nodes_to_exclude=others,
                                     op_types_to_quantize=("MatMul",), algo_config=algo)
            q.process()
            q.model.save_model_to_file(str(dst), use_external_data_format=False)
        return dst

    def describe(self) -> dict[str, Any]:
        attention = ({"form": "split", "split_nodes": self.split, "what": "query, key and value MatMuls (4-bit "
                      "candidates) feeding MultiHeadAttention"} if self.cfg.attention == "split" else
                     {"form": "packed", "what": "fused Attention, 8-bit (QAttention): onnxruntime has no 4-bit form "
                      "of its packed QKV weight"})
        return {**self.cfg.as_dict(), **({"gptq": self.gptq} if self.gptq else {}),
                **({"rotation": self.rotation} if self.rotation else {}), "graph": "fused", "eight_bit": "dynamic INT8, per-channel 8-bit weights "
                "(MatMulInteger for MatMuls kept off 4 bits, QAttention for a packed attention)",
                "attention": attention, "embedding_tables": self.last_tables, "storage": self.last_storage}


@dataclass(frozen=True)
class Int4Graph:
    """The small graph written at ``path`` and its manifest figures."""
    path: Path
    requires: dict[str, Any]
    quantization: dict[str, Any]
    accuracy: dict[str, Any]
    bytes: int

    @property
    def within_budget(self) -> bool:
        return self.accuracy.get("within_budget") is not False


def small_graph(fused: str | Path, out: str | Path, cfg: Int4Config, probe: AccuracyProbe, budget: float,
                say: Callable[[str], None], sensitivity_size: int = 64,
                calibration: Callable[[], Iterable[Feeds]] | None = None) -> Int4Graph:
    """Make the small graph of ``fused`` at ``out`` through the gate (see the module docstring);
    ``calibration()``: feeds for ``--int4-algorithm gptq``."""
    budget = cfg.max_accuracy_loss if cfg.max_accuracy_loss is not None else budget
    with work_dir("q4src") as tmp:
        split = 0
        if cfg.attention == "split":
            split = split_attention(fused, Path(tmp) / "split.onnx")
            fused = Path(tmp) / "split.onnx"
        if gemms_to_matmuls(fused, Path(tmp) / "matmuls.onnx"):     # the pooler and heads: 4-bit candidates too
            fused = Path(tmp) / "matmuls.onnx"
        rotation = None
        if cfg.rotate:
            rotation = rotate_inputs(fused, Path(tmp) / "rotated.onnx", list(_blockable(fused, cfg.block_size)))
            fused = Path(tmp) / "rotated.onnx"
        quantizer = Int4Quantizer(fused, cfg, split, calibration, say, rotation)
        candidates = quantizer.candidates()
        if not candidates:
            raise ConfigError(f"no MatMul of the graph has a K that block {cfg.block_size} divides, and no word "
                              "table", "use a smaller block size")
        say(f"quantizing 4-bit ({len(quantizer.matmuls)} MatMuls, {len(quantizer.table)} table; block "
            f"{cfg.block_size}, accuracy_level {cfg.accuracy_level}, {cfg.algorithm}, attention {cfg.attention})")
        order = GateOrder("INT4", "8-bit", quantizer.bytes_saved)
        guard: GuardResult = quantize_with_guard(quantizer, out, probe, budget, sensitivity_size, say,
                                                 allow_miss=True, order=order)
    counts = op_type_counts(out)
    quant = {**quantizer.describe(), "candidate_nodes": len(candidates),
             "four_bit": [n for n in candidates if n not in guard.excluded], "eight_bit": list(guard.excluded),
             "op_counts": counts}
    requires = {"u8s8_exact": any(counts.get(op) for op in U8S8_OPS), **REQUIREMENTS, "contrib_ops": _contrib_ops(out)}
    return Int4Graph(Path(out), requires, quant, guard.as_dict(budget), Path(out).stat().st_size)


def _with_weights(src: Path, dst: Path, weights: dict[str, Any]) -> Path:
    """``src`` with the B weights of the MatMuls named in ``weights`` replaced, written to ``dst``."""
    model = load(src)
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.name in weights:
            inits[node.input[1]].CopyFrom(numpy_helper.from_array(weights[node.name], node.input[1]))
    onnx.save(model, str(dst))
    return dst


def _contrib_ops(path: str | Path) -> list[str]:
    """The onnxruntime contrib op types the graph uses (its ``requires.contrib_ops``)."""
    return sorted({n.op_type for n in load(path).graph.node if n.domain == "com.microsoft"})


def _blockable(path: Path, block: int) -> dict[str, tuple[int, int]]:
    """The MatMuls with a 2-D weight initializer whose K (rows) ``block`` divides, the 4-bit candidates (not a
    rotation's own), in graph order, with their weight's (K, N)."""
    model = load(path)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    names = set(weight_nodes(model, ("MatMul",))) - set(rotation_nodes(model))    # a rotation stays float
    out = {}
    for node in graph.node:
        if node.name in names and len(node.input) > 1 and node.input[1] in inits:
            dims = inits[node.input[1]].dims
            if len(dims) == 2 and dims[0] % block == 0:
                out[node.name] = (int(dims[0]), int(dims[1]))
    return out
