"""Downstream scores of a sentence-embedding model or bundle: the held-out data sets, the embedders, and
the teacher / student fp32 / student INT8 comparison (``edgebert evaluate --task embed``, the pipeline).

``DownstreamData.load(root)`` reads, from a folder such as ``../shared/data``:

- ``mrpc/dev.tsv``: the sentence pairs and their paraphrase labels;
- ``sst2/train.tsv`` (the first ``probe_examples``, default 4000, lines) and ``sst2/dev.tsv``;
- ``wikitext-2-raw/wiki.test.raw``: the first ``paragraphs`` (default 300; ``evaluate``: all) paragraphs, in file order,
  that split into a first sentence of at least 5 words (the query) and a rest of at least 20 (its
  document).

Every text is embedded once per model by mean pooling of the last hidden states over the real tokens
([CLS] and [SEP] included, as sentence-transformers pools), cut at the same length for every model
(``max_seq_len``: 256, or the model's maximum when shorter). A model directory runs in PyTorch; a
bundle runs through ``EdgeSession.embed`` (onnxruntime, torch-free) at the precision asked for. The
scores are ``edgebert.scores.embeddings``': MRPC paraphrase ROC-AUC of the cosine, SST-2 probe accuracy,
WikiText retrieval recall@1 / recall@10 / MRR.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from edgebert.bundle import read_manifest
from edgebert.bundle.task_registry import task_serving
from edgebert.data.corpus import paragraphs as corpus_paragraphs
from edgebert.data.corpus import read_corpus
from edgebert.data.tasks import read_task_tsv
from edgebert.errors import ConfigError, DataError
from edgebert.scores.embeddings import paraphrase_auc, probe_accuracy, require_sklearn, retrieval_scores

DATA_FILES = {"mrpc": "mrpc/dev.tsv", "sst2_train": "sst2/train.tsv", "sst2_dev": "sst2/dev.tsv",
              "wikitext": "wikitext-2-raw/wiki.test.raw"}
METRICS = ("mrpc_auc", "sst2_probe_accuracy", "retrieval_recall_at_1", "retrieval_recall_at_10", "retrieval_mrr")
MAX_SEQ_LEN, PROBE_EXAMPLES, PARAGRAPHS = 256, 4000, 300
# ``evaluate --task embed``: every paragraph (1,633 in WikiText-2 test). On 300 queries recall@1 is ~63 hits and
# a student's retention moves by several points between equally good students (benchmarks/embed_rescore.py);
# the pipeline and the demo keep PARAGRAPHS for speed and say how many they scored.
ALL_PARAGRAPHS = 1_000_000
MIN_QUERY_WORDS, MIN_DOCUMENT_WORDS = 5, 20
BATCH_SIZE = 32
# a WikiText sentence ends with a spaced " . ", " ? " or " ! " before a capital, a digit or a quote
_SENTENCE_END = re.compile(r" [.!?] (?=[A-Z0-9\"'])")

Embedder = Callable[[list[str]], np.ndarray]


def query_and_document(paragraph: str) -> tuple[str, str] | None:
    """(first sentence, the rest) of a WikiText paragraph, or None when it has one sentence or either
    part is too short (``MIN_QUERY_WORDS`` / ``MIN_DOCUMENT_WORDS``)."""
    end = _SENTENCE_END.search(paragraph)
    if end is None:
        return None
    query, rest = paragraph[:end.start() + 2].strip(), paragraph[end.end():].strip()
    if len(query.split()) < MIN_QUERY_WORDS or len(rest.split()) < MIN_DOCUMENT_WORDS:
        return None
    return query, rest


@dataclass(frozen=True)
class DownstreamData:
    """The held-out texts and labels of the three downstream scores (see the module docstring)."""

    root: Path
    pairs: list[tuple[str, str]]       # MRPC dev
    pair_labels: np.ndarray            # 1: a paraphrase
    probe_train: list[str]             # SST-2 train (the first probe_examples)
    probe_train_labels: np.ndarray
    probe_dev: list[str]               # SST-2 dev
    probe_dev_labels: np.ndarray
    queries: list[str]                 # WikiText-2 test: first sentences ...
    documents: list[str]               # ... and the rest of their paragraphs

    @classmethod
    def load(cls, root: str | Path, probe_examples: int = PROBE_EXAMPLES, paragraphs: int = PARAGRAPHS,
             limit: int | None = None) -> "DownstreamData":
        """Read the four files under ``root``; ``limit`` caps the scored sets (pairs, dev sentences,
        paragraphs), never the probe's training set. A missing file is a one-line DataError."""
        root = Path(root)
        for name, value in (("probe_examples", probe_examples), ("paragraphs", paragraphs), ("limit", limit)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 2):
                raise ConfigError(f"{name}={value!r} must be an integer >= 2")
        files = {key: root / rel for key, rel in DATA_FILES.items()}
        missing = [str(path) for path in files.values() if not path.is_file()]
        if missing:
            what = f"{root} not found" if not root.is_dir() else f"{missing[0]} not found" + (
                f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            raise DataError(what, f"downstream scores need a folder holding {', '.join(DATA_FILES.values())}, "
                                  "e.g. ../shared/data")
        cap = (lambda items: items[:limit]) if limit else (lambda items: items)
        mrpc = cap(read_task_tsv(files["mrpc"], "mrpc")[0])
        train = read_task_tsv(files["sst2_train"], "sst2")[0][:probe_examples]
        dev = cap(read_task_tsv(files["sst2_dev"], "sst2")[0])
        wiki = corpus_paragraphs(read_corpus(files["wikitext"], "wikitext"), MIN_QUERY_WORDS + MIN_DOCUMENT_WORDS)
        split = [qd for qd in map(query_and_document, wiki) if qd][:min(paragraphs, limit or paragraphs)]
        if len(split) < 2:
            raise DataError(f"{files['wikitext']} has {len(split)} paragraph(s) of two sentences or more",
                            "retrieval needs at least 2")
        labels = lambda examples: np.asarray([e.label for e in examples], dtype=np.int64)  # noqa: E731
        return cls(root, [(e.text_a, e.text_b or "") for e in mrpc], labels(mrpc), [e.text_a for e in train],
                   labels(train), [e.text_a for e in dev], labels(dev), [q for q, _ in split], [d for _, d in split])

    def texts(self) -> list[str]:
        """Every distinct text to embed, in first-use order."""
        every = [t for pair in self.pairs for t in pair] + self.probe_train + self.probe_dev
        return list(dict.fromkeys(every + self.queries + self.documents))

    def describe(self) -> dict[str, Any]:
        return {"root": str(self.root), "mrpc_pairs": len(self.pairs), "sst2_train": len(self.probe_train),
                "sst2_dev": len(self.probe_dev), "paragraphs": len(self.queries), "texts": len(self.texts())}


def scores_of(embed: Embedder, data: DownstreamData) -> dict[str, float]:
    """The five scores (``METRICS``) of the embeddings ``embed`` gives ``data``'s texts."""
    texts = data.texts()
    vectors = np.asarray(embed(texts), dtype=np.float64)
    row = {t: i for i, t in enumerate(texts)}
    of = lambda items: vectors[[row[t] for t in items]]  # noqa: E731
    retrieval = retrieval_scores(of(data.queries), of(data.documents))
    return {"mrpc_auc": paraphrase_auc(of([a for a, _ in data.pairs]), of([b for _, b in data.pairs]),
                                       data.pair_labels),
            "sst2_probe_accuracy": probe_accuracy(of(data.probe_train), data.probe_train_labels,
                                                  of(data.probe_dev), data.probe_dev_labels),
            **{f"retrieval_{k}": retrieval[k] for k in ("recall_at_1", "recall_at_10", "mrr")}}


def is_bundle(path: Path) -> bool:
    return (Path(path) / "manifest.json").is_file()


def model_embedder(path: Path, max_seq_len: int = MAX_SEQ_LEN, batch_size: int = BATCH_SIZE
                   ) -> tuple[Embedder, dict[str, Any]]:
    """Mean-pooled embeddings of a model directory in PyTorch (``edgebert.stages.metrics``)."""
    from edgebert.data.task_data import encode_texts
    from edgebert.data.tokenizer import SpecialIds, load_tokenizer
    from edgebert.model import load_model
    from edgebert.stages.metrics import sentence_embeddings

    model, tok = load_model(path).eval(), load_tokenizer(path)
    length = min(max_seq_len, model.config.max_position_embeddings)

    def embed(texts: list[str]) -> np.ndarray:
        data = encode_texts(texts, tok, length)
        return sentence_embeddings(model, data, batch_size, SpecialIds.of(tok).pad).numpy()

    return embed, {"kind": "model", "architecture": model.config.architecture, "max_seq_len": length}


def bundle_embedder(path: Path, precision: str | None = None, max_seq_len: int = MAX_SEQ_LEN,
                    batch_size: int = BATCH_SIZE) -> tuple[Embedder, dict[str, Any]]:
    """Mean-pooled embeddings of an ``embed`` bundle through ``EdgeSession.embed`` (torch-free)."""
    from edgebert.runtime import EdgeSession

    limit = read_manifest(path).max_length
    session = EdgeSession(path, provider="cpu", precision=precision, batch_size=batch_size,
                          max_length=min(max_seq_len, limit))
    if session.task != task_serving("embed").name:
        raise ConfigError(f"{path} is a '{session.task}' bundle; --task embed needs an 'embed' bundle",
                          "export the encoder with --task embed")

    def embed(texts: list[str]) -> np.ndarray:
        return session.embed(texts, pooling="mean", normalize=False, truncate=True)

    return embed, {"kind": "bundle", "precision": session.precision, "provider": session.provider,
                   "max_seq_len": session.max_length, "through": "EdgeSession.embed(pooling='mean')"}


def embedder(path: str | Path, precision: str | None = None, max_seq_len: int | None = None,
             batch_size: int | None = None) -> tuple[Embedder, dict[str, Any]]:
    """The embedder of a model directory or a bundle (see the module docstring)."""
    path, length, size = Path(path), max_seq_len or MAX_SEQ_LEN, batch_size or BATCH_SIZE
    if is_bundle(path):
        return bundle_embedder(path, precision, length, size)
    if precision not in (None, "fp32"):
        raise ConfigError(f"--precision {precision} is for bundles; {path} is a model directory (fp32, PyTorch)")
    return model_embedder(path, length, size)


def downstream_scores(path: str | Path, data: DownstreamData, precision: str | None = None, *,
                      max_seq_len: int | None = None, batch_size: int | None = None) -> dict[str, Any]:
    """``{"metrics": the five scores, "details": how they were measured}`` of one model or bundle."""
    require_sklearn()                        # before any model is loaded
    t0 = time.perf_counter()
    embed, details = embedder(path, precision, max_seq_len, batch_size)
    metrics = scores_of(embed, data)
    return {"metrics": metrics, "details": {**details, "seconds": round(time.perf_counter() - t0, 1)}}


def retention(student: dict[str, float], teacher: dict[str, float]) -> dict[str, float | None]:
    """student / teacher per metric (None where the teacher scores 0)."""
    return {k: (student[k] / teacher[k] if teacher.get(k) else None) for k in METRICS if k in student}


def compare_downstream(teacher_dir: str | Path, bundle_dir: str | Path, data: DownstreamData,
                       precisions: Sequence[str] = ("fp32", "int8")) -> dict[str, Any]:
    """The teacher (PyTorch) and the student bundle at each of ``precisions`` it has, on the same texts
    cut at the same length: ``{"teacher": scores, "student_fp32": ..., "student_int8": ..., "retention":
    {"student_fp32": {metric: student / teacher}, ...}, "details": ..., "data": ...}``."""
    from edgebert.model import BertConfig

    manifest = read_manifest(bundle_dir)
    length = min(MAX_SEQ_LEN, manifest.max_length, BertConfig.load(teacher_dir).max_position_embeddings)
    runs = {"teacher": downstream_scores(teacher_dir, data, max_seq_len=length)}
    models = manifest.models
    for precision in precisions:
        if precision in models:
            runs[f"student_{precision}"] = downstream_scores(bundle_dir, data, precision, max_seq_len=length)
    teacher = runs["teacher"]["metrics"]
    out: dict[str, Any] = {name: run["metrics"] for name, run in runs.items()}
    out["retention"] = {name: retention(run["metrics"], teacher) for name, run in runs.items() if name != "teacher"}
    out["details"] = {name: run["details"] for name, run in runs.items()}
    out["data"] = data.describe()
    return out
