"""Runtime methods named after a transformers pipeline or a sentence-transformers call keep that tool's
defaults: the signatures' defaults are compared with the installed transformers / sentence-transformers
(not only results with explicit arguments)."""

from __future__ import annotations

import inspect

import pytest

from conftest import QA_PIPELINE_GONE, TRANSFORMERS_MAJOR
from edgebert.runtime import EdgeSession

transformers = pytest.importorskip("transformers")


def defaults(function) -> dict:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


def test_answer_has_the_question_answering_pipelines_defaults():
    if TRANSFORMERS_MAJOR >= 5:
        pytest.skip(QA_PIPELINE_GONE)
    from transformers.pipelines.question_answering import QuestionAnsweringPipeline

    ours = defaults(EdgeSession.answer)
    theirs = {**defaults(QuestionAnsweringPipeline.preprocess), **defaults(QuestionAnsweringPipeline.postprocess)}
    for name in ("top_k", "max_answer_len", "handle_impossible_answer", "max_question_len", "align_to_words",
                 "doc_stride"):
        assert ours[name] == theirs[name], name
    # the pipeline's max_seq_len (None) means min(model_max_length, 384): 384 for any BERT
    assert theirs["max_seq_len"] is None and ours["max_length"] == 384


def test_tag_has_the_token_classification_pipelines_grouping():
    from transformers.pipelines.token_classification import TokenClassificationPipeline

    ours, theirs = defaults(EdgeSession.tag), defaults(TokenClassificationPipeline._sanitize_parameters)
    # the pipeline's ignore_labels=None means ["O"], aggregation_strategy=None means NONE (one result per token)
    assert theirs["ignore_labels"] is None and ours["ignore_labels"] == ("O",)
    assert theirs["aggregation_strategy"] is None and ours["aggregation"] == "none"
