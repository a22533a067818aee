"""Tiny seeded bundles of every task the ecosystem's loaders run (embed, cls, token-cls, qa), built once
per pytest base temp dir, and the texts the loader tests compare on (not a test module)."""

from __future__ import annotations

import json
from pathlib import Path

from runtime_fixtures import make_tiny_model_dir, tiny_bundle

NER_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
LIGHT = {"validation_batch_sizes": (1, 3), "validation_seq_lens": (7, 32)}
TEXTS = ["the film is a charming and moving comedy", "too long and not funny",
         "one of the best films of the year , i loved it", "dull"]
QUESTION = ("what was the movie ?", "the actors are wonderful and the movie was great fun , but the ending was awful .")


def loader_bundles(root: Path) -> dict[str, Path]:
    """``{task: bundle}``: fp32 + portable INT8 bundles of tiny seeded models (the QA one is the toy
    fine-tuned span model of ``qa_bundles``, so that its answers are answers), and ``targets``: the embed
    model with a second INT8 target (x86-vnni)."""
    from edgebert.exporters import ExportConfig, export_bundle
    from qa_bundles import qa_bundle

    root = Path(root)
    embed_model, embed = tiny_bundle(root, "embed")
    out = {"embed": embed, "cls": tiny_bundle(root, "cls")[1]}
    ner_dir, ner_bundle = root / "hf_ner_model", root / "hf_ner_bundle"
    if not (ner_bundle / "manifest.json").is_file():
        make_tiny_model_dir(ner_dir, "BertForTokenClassification", seed=5, id2label=NER_LABELS)
        export_bundle(ExportConfig(model_dir=ner_dir, out_dir=ner_bundle, int8=True, max_accuracy_loss=0.5, **LIGHT))
    out["token-cls"] = ner_bundle
    targets = root / "hf_targets_bundle"          # a second INT8 target: its own file beside model_quantized.onnx
    if not (targets / "manifest.json").is_file():
        export_bundle(ExportConfig(model_dir=embed_model, out_dir=targets, int8=True,
                                   int8_targets=("portable", "x86-vnni"), max_accuracy_loss=0.5, **LIGHT))
    out["targets"] = targets
    out["qa"] = qa_bundle(root)
    return out


def small_bundle(root: Path) -> Path:
    """The tiny seeded embed model of ``loader_bundles`` exported with fp32, the portable INT8 graph and the small
    graph (``onnx/model_q4.onnx``: 4-bit MatMulNBits + 4-bit word table, ``export --int8 --int4``), built once
    per ``root``."""
    from edgebert.exporters import ExportConfig, export_bundle

    model_dir, _ = tiny_bundle(Path(root), "embed")
    out = Path(root) / "hf_small_bundle"
    if not (out / "manifest.json").is_file():
        export_bundle(ExportConfig(model_dir=model_dir, out_dir=out, int8=True, int4=True, **LIGHT))
    return out


def qa_examples(bundle: Path, n: int = 6) -> list[tuple[str, str]]:
    """(question, context) of the toy QA model's dev questions (held out from its training)."""
    data = json.loads((Path(bundle).parent / "dev.json").read_text())
    pairs = [(qa["question"], p["context"]) for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]
    return pairs[:n]


def int8_budget(bundle: Path) -> tuple[str, float]:
    """The export gate's metric and budget of the bundle's default INT8 graph."""
    accuracy = json.loads((Path(bundle) / "manifest.json").read_text())["models"]["int8"]["accuracy"]
    return accuracy["metric"], float(accuracy["max_accuracy_loss"])
