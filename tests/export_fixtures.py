"""Tiny seeded BERT directories and calibration text for the export and quantization tests
(not a test module). The tokenizer and model builders are the runtime tests' (one copy)."""

from __future__ import annotations

from pathlib import Path

from runtime_fixtures import WORDS  # noqa: F401
from runtime_fixtures import make_tiny_model_dir as make_model_dir  # noqa: F401  (re-exported: the export tests import it here)

SENTENCES = [
    "the film is a charming and moving comedy",
    "a dull , boring mess of a movie",
    "the actors are wonderful but the script is terrible",
    "one of the best films of the year",
    "i hate this movie , the plot is awful",
    "beautiful music and a great story",
    "too long and not funny",
    "the director has a good heart and a fine mind",
]


def make_calib_text(path: Path, n: int = 48) -> Path:
    """A plain-text calibration file, one sentence per line (variations of SENTENCES)."""
    lines = [f"{SENTENCES[i % len(SENTENCES)]} {' '.join(WORDS[(i * 7) % len(WORDS): (i * 7) % len(WORDS) + i % 9])}"
             for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def make_small_bundle(root: Path) -> Path:
    """A tiny seeded embedding bundle with INT8 and the small (int4) graph (``export --int8 --int4``)."""
    from edgebert.exporters import ExportConfig, export_bundle

    model_dir = make_model_dir(root / "model", seed=5)
    calib = make_calib_text(root / "calib.txt", n=64)
    out = root / "bundle"
    export_bundle(ExportConfig(model_dir=model_dir, out_dir=out, int8=True, int4=True, calib=calib, calib_size=32,
                               gate_size=32, validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    return out
