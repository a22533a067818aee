"""Tiny seeded bundles of every task ``edgebert.scaleout`` serves (embed, cls, token-cls, qa, rerank), for its tests.

Not a test module. ``scaleout_bundle(root, task)`` exports one once per ``root`` (pass
``tmp_path_factory.getbasetemp()`` to share it); in the torch-free scale-out venv (``make test-scaleout``) the
bundles come ready-made from ``$EDGEBERT_TEST_BUNDLES`` (this file run as a script by .venv). Also the texts the
tests run: SST-2-like sentences of the tiny vocabulary, a few long enough for several batches' padding.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from runtime_fixtures import READY_BUNDLES, make_tiny_model_dir, tiny_bundle

TASKS = ("embed", "cls", "token-cls", "qa", "rerank")
ARCHITECTURES = {"token-cls": "BertForTokenClassification", "qa": "BertForQuestionAnswering",
                 "rerank": "BertForSequenceClassification"}
NER_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}

TEXTS = ["the film was good", "a dull and boring movie", "great acting by the cast", "",
         "i loved the music and the ending was perfect", "worst plot ever",
         "the director made a beautiful drama about love and life in the old world", "fun",
         "she said the story was moving but the script was a mess", "not bad at all",
         "two actors and one woman make this comedy work", "why would anyone watch this",
         "every scene felt long", "charming", "the best movie of the year by far, i think",
         "terrible, terrible, terrible", "he knew how to tell a story", "it was just fine",
         "the characters seemed real and the performances were wonderful", "what a mess"]
QUESTIONS = [("who made the film", "the director made the film in the old world with two actors"),
             ("what was good", "the music was good but the plot was dull"),
             ("where is the story", "the story takes place in the old world, far from here"),
             ("who loved it", "she loved it and he did not")]


def scaleout_bundle(root: Path, task: str) -> Path:
    """The bundle folder of a tiny seeded model of ``task`` (embed / cls: ``runtime_fixtures``' with fp32 +
    INT8; token-cls / qa: fp32 + dynamic INT8 of an untrained seeded head: its answers and entities are
    arbitrary but deterministic, which is all an equality test needs)."""
    if task in ("embed", "cls"):
        return tiny_bundle(root, task)[1]
    ready = os.environ.get(READY_BUNDLES)
    name = f"tiny_{task.replace('-', '_')}_bundle"
    if ready and (Path(ready) / name / "manifest.json").is_file():
        return Path(ready) / name
    bundle = Path(root) / name
    if not (bundle / "manifest.json").is_file():
        from edgebert.exporters import ExportConfig, export_bundle

        extra = {"id2label": NER_LABELS} if task == "token-cls" else {}
        extra = {"id2label": {0: "LABEL_0"}} if task == "rerank" else extra       # one relevance logit
        model = make_tiny_model_dir(Path(root) / f"tiny_{task.replace('-', '_')}_model", ARCHITECTURES[task],
                                    seed=5, **extra)
        export_bundle(ExportConfig(model_dir=model, out_dir=bundle, task=task, int8=False,
                                   validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    return bundle


def small_graph_bundle(root: Path) -> Path:
    """The tiny embed model exported with its INT8 graph and the small (4-bit) graph (``export --int8 --int4``),
    for the ``--target int4`` paths (ready-made from ``$EDGEBERT_TEST_BUNDLES`` in the torch-free venvs)."""
    ready = os.environ.get(READY_BUNDLES)
    if ready and (Path(ready) / "tiny_small_bundle" / "manifest.json").is_file():
        return Path(ready) / "tiny_small_bundle"
    bundle = Path(root) / "tiny_small_bundle"
    if not (bundle / "manifest.json").is_file():
        from edgebert.exporters import ExportConfig, export_bundle

        model = tiny_bundle(root, "embed")[0]
        export_bundle(ExportConfig(model_dir=model, out_dir=bundle, int8=True, int4=True, int4_algorithm="rtn",
                                   int4_max_accuracy_loss=0.5, validation_batch_sizes=(1, 3),
                                   validation_seq_lens=(7, 32)))
    return bundle


def inputs_of(task: str, copies: int = 1) -> dict[str, list]:
    if task == "rerank":            # every question against every context: a query's passages are rows
        pairs = [(q, c) for q, _ in QUESTIONS for _, c in QUESTIONS]
        return {"query": [q for q, _ in pairs] * copies, "passage": [c for _, c in pairs] * copies}
    if task == "qa":
        return {"question": [q for q, _ in QUESTIONS] * copies, "context": [c for _, c in QUESTIONS] * copies}
    return {"text": TEXTS * copies}


def reference(bundle: Path, task: str, cols: dict[str, list], **session_options) -> dict[str, list]:
    """EdgeSession's own results on every row at once (its default batch size); ``session_options``: the graph a
    server serves (``precision``, ``int8_target``)."""
    from edgebert.runtime import EdgeSession

    session = EdgeSession(bundle, provider="cpu", threads=1, **session_options)
    if task == "embed":
        return {"embedding": list(session.embed(cols["text"]))}
    if task == "cls":
        result = session.classify(cols["text"])
        return {"label": result.labels, "score": list(result.scores)}
    if task == "token-cls":
        found = session.tag(cols["text"], aggregation="simple")
        return {"entities": [[{"entity": e["entity_group"], "score": e["score"], "word": e["word"],
                               "start": e["start"], "end": e["end"]} for e in text] for text in found]}
    if task == "rerank":
        return {"score": [float(x) for x in session.predict(list(zip(cols["query"], cols["passage"])))]}
    answers = session.answer(cols["question"], cols["context"])
    return {k: [a[k] for a in answers] for k in ("answer", "start", "end", "score")}


def assert_same(task: str, got: dict[str, list], want: dict[str, list]) -> None:
    """Embeddings within 1e-6; labels, entities (their words, labels, offsets) and answers equal; scores
    within 1e-6."""
    if task == "embed":
        diff = np.abs(np.stack(got["embedding"]) - np.stack(want["embedding"])).max()
        assert diff <= 1e-6, diff
        return
    if task == "token-cls":
        strip = lambda rows: [[{k: v for k, v in e.items() if k != "score"} for e in r] for r in rows]  # noqa: E731
        assert strip(got["entities"]) == strip(want["entities"])
        scores = [e["score"] for r in got["entities"] for e in r]
        assert np.allclose(scores, [e["score"] for r in want["entities"] for e in r], atol=1e-6, rtol=0)
        assert scores, "the tiny tagger found no entity: the comparison would prove nothing"
        return
    for name, values in want.items():
        if name == "score":
            assert np.allclose(got[name], values, atol=1e-6, rtol=0)
        else:
            assert list(got[name]) == list(values), name


if __name__ == "__main__":
    # python tests/scaleout_fixtures.py DIR: the bundles, made here (torch) for the torch-free scale-out venv
    out = Path(sys.argv[1])
    for task in TASKS:
        scaleout_bundle(out, task)
    small_graph_bundle(out)
    print(f"tiny bundles in {out}: {', '.join(TASKS)}, and the embed one with its small graph")
