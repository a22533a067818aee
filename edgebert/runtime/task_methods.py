"""The task methods of ``EdgeSession`` (``embed``, ``logits`` / ``classify``, ``tag``, ``fill_mask``, ``answer``), mixed
into it: each validates its input, runs the bundle through the session's ``run`` / ``_batches`` and shapes the
result as the transformers pipeline (or sentence-transformers) it stands for would."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from edgebert.bundle.task_registry import bundle_task
from edgebert.errors import BundleError, ConfigError, DataError
from edgebert.runtime.numeric import softmax
from edgebert.runtime.text import check_text, check_texts, pad_batch
from edgebert.runtime.vector_pooling import choose_pooling

if TYPE_CHECKING:   # task-specific modules load with their first use, not with every session
    from edgebert.runtime.results import ClassificationResult, MaskPrediction
    from edgebert.runtime.tagging import Entity


class TaskMethods:
    """Mixed into ``EdgeSession`` (which provides ``run``, ``tokenize``, ``_batches``, ``_require``, ``encoder`` ...)."""

    def embed(self, texts: str | Sequence[str], pooling: str | None = None, normalize: bool = True,
              batch_size: int | None = None, truncate: bool | None = None) -> np.ndarray:
        """(N, hidden) float32 sentence embeddings, in input order (a str is a batch of one).

        pooling: ``mean`` averages the token vectors under the attention mask ([CLS]/[SEP] included,
        as sentence-transformers does), ``cls`` takes the [CLS] vector; None (the default): the model's
        pooling, as the bundle's sentence-transformers files state it (``session.pooling``: mean, cls or
        max; mean when the model states none). ``normalize`` scales each row to unit L2
        norm (a dot product is then the cosine). A text with no tokens (``""``, only spaces) gets the
        zero vector. An empty list gives shape (0, hidden). ``encode`` is sentence-transformers' form.
        """
        self._require("embed")
        chosen = choose_pooling(pooling, self._stated_pooling())
        items, _ = check_texts(texts)
        return self._vectors(items, chosen, bool(normalize), batch_size, self._truncate(truncate))

    def logits(self, texts: Any, batch_size: int | None = None, truncate: bool | None = None) -> np.ndarray:
        """Raw ``logits`` of a ``cls`` or ``rerank`` bundle, (N, C) float32 in input order (texts or pairs)."""
        if bundle_task(self.task).metric_shape != ("batch", "num_labels"):   # a classifier's or reranker's logits
            self._require("classify")
        rows = self.tokenize(texts, truncate)
        result = np.zeros((len(rows), len(self.label_names) or 2), dtype=np.float32)
        for idx, _, out in self._batches(rows, ["logits"], batch_size):
            if out["logits"].shape[-1] != result.shape[1]:  # labels missing from the manifest
                result = np.zeros((len(rows), out["logits"].shape[-1]), dtype=np.float32)
            result[idx] = out["logits"]
        return result

    def classify(self, texts: Any, batch_size: int | None = None,
                 truncate: bool | None = None) -> ClassificationResult:
        """Labels and softmax probabilities for texts, or for (text, text) pairs (e.g. MRPC)."""
        if bundle_task(self.task).one_label:     # a softmax over its one logit would say 1.0 for every pair
            raise ConfigError(f"classify() needs a 'cls' bundle, not '{self.task}'", "use predict(pairs) or rank()")
        logits = self.logits(texts, batch_size, truncate)
        names = self.label_names or [f"LABEL_{i}" for i in range(logits.shape[1])]
        probs = softmax(logits)
        ids = probs.argmax(axis=1).astype(np.int64) if len(probs) else np.zeros(0, np.int64)
        from edgebert.runtime.results import ClassificationResult
        return ClassificationResult([names[i] for i in ids], ids, probs, names)

    def tag(self, texts: str | Sequence[str], aggregation: str = "none", *, stride: int | None = None,
            ignore_labels: Sequence[str] = ("O",), batch_size: int | None = None
            ) -> list[Entity] | list[list[Entity]]:
        """Named entities of a ``token-cls`` bundle, grouped as Hugging Face's token-classification
        pipeline groups them (``edgebert.runtime.tagging``): for one str its list of entities, for a
        list of texts one list per text. Each entity: ``entity_group`` (``entity`` with ``aggregation="none"``),
        ``score``, ``word``, ``start``, ``end`` (character offsets into the text). ``aggregation``: ``none`` (the
        pipeline's default: one result per sub-token) | ``simple`` | ``first`` (entities grouped). A text longer
        than ``max_length`` is tagged in windows overlapping by ``stride`` sub-tokens (default: a quarter of a
        window), never truncated."""
        self._require("tag")
        items, _ = check_texts(texts)
        width = int(self.manifest.outputs[0].shape[-1])     # labels of a manifest that names none
        labels = tuple(self.label_names) or tuple(f"LABEL_{i}" for i in range(width))

        from edgebert.runtime.tagging import Tagger, batched_logits, tag_texts
        run = batched_logits(lambda feeds: self.run(feeds, ["logits"])["logits"], self.pad_id,
                             self._batch_size(batch_size), self.batch_tokens)
        results = tag_texts(Tagger(self.encoder, labels), items, run, aggregation, stride, ignore_labels)
        return results[0] if isinstance(texts, str) else results

    def fill_mask(self, text: str, top_k: int = 5, truncate: bool | None = None) -> list[MaskPrediction]:
        """Top-k tokens for every mask token in ``text`` (one ``MaskPrediction`` per mask, in order)."""
        self._require("fill_mask")
        if not isinstance(text, str):
            raise DataError(f"fill_mask() takes one str, not {type(text).__name__}")
        check_text(text, "text")
        if not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"top_k={top_k!r} must be a positive integer")
        if self.mask_id is None:
            raise BundleError(f"{self.bundle_dir} manifest names no mask_id", "re-export the bundle")
        rows = self.encoder.encode([text], False, self._truncate(truncate))
        positions = np.flatnonzero(rows[0].ids == int(self.mask_id))
        if not len(positions):
            mask = self.encoder.token(self.mask_id)
            if rows[0].truncated and int(self.mask_id) in self.encoder.tokenizer.encode(text).ids:
                raise DataError(f"every {mask} token is past the truncation point ({self.max_length} tokens)",
                                f"shorten the text, or put {mask} within the first {self.max_length} tokens")
            raise DataError(f"no {mask} token in the text", f"write {mask} where a word should be predicted")
        from edgebert.runtime.results import MaskPrediction
        logits = self.run(pad_batch(rows, self.pad_id), ["logits"])["logits"][0]   # (T, V)
        predictions = []
        for pos in positions:
            probs = softmax(logits[pos][None, :])[0]
            top = np.argsort(-probs, kind="stable")[:top_k]
            predictions.append(MaskPrediction(int(pos), [self.encoder.token(t) for t in top],
                                              [int(t) for t in top], [float(probs[t]) for t in top]))
        return predictions

    def answer(self, question: Any, context: Any, top_k: int = 1, max_answer_len: int = 15,
               doc_stride: int | None = None, max_length: int = 384, handle_impossible_answer: bool = False,
               batch_size: int | None = None, max_question_len: int = 64, align_to_words: bool = True) -> Any:
        """A ``qa`` bundle's answers as transformers' question-answering pipeline gives them, with its defaults
        (``runtime.answer``; ``max_length`` is the pipeline's ``max_seq_len``)."""
        from edgebert.runtime.answer import answer_questions
        return answer_questions(self, question, context, top_k, max_answer_len, doc_stride, max_length,
                                handle_impossible_answer, batch_size, max_question_len, align_to_words)
