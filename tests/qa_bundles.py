"""Tiny question-answering models and bundles for the QA export / runtime tests (not a test module).

``toy_qa(root)`` fine-tunes a tiny seeded span model on the toy SQuAD task of ``squad_helpers`` (about
6 s, 100 F1 on its dev file); ``qa_bundle(root)`` exports it (fp32 + INT8 gated on the toy dev
questions). Both are built once per ``root`` (pass ``tmp_path_factory.getbasetemp()`` to share them
across test modules). ``hf_pipeline(model_dir)`` is transformers' question-answering pipeline on the
same weights and tokenizer.
"""

from __future__ import annotations

from pathlib import Path

from conftest import question_answering_pipeline
from distill_helpers import make_model_dir
from squad_helpers import write_toy_squad

TOY_LENGTH = 64          # the toy model's positions: the bundle's windows


def toy_qa(root: Path) -> Path:
    """The folder holding ``teacher`` (a fine-tuned BertForQuestionAnswering), ``train.json``, ``dev.json``
    (answerable, two gold answers each) and ``dev2.json`` (SQuAD 2.0, a third unanswerable)."""
    from edgebert.stages.finetune import FinetuneConfig, finetune

    root = Path(root) / "toy_qa"
    if not (root / "teacher" / "best_checkpoint.json").is_file():
        make_model_dir(root / "base", "BertForMaskedLM", layers=2, max_position=TOY_LENGTH)
        write_toy_squad(root / "train.json", 160, seed=0, words=(6, 20))
        write_toy_squad(root / "dev.json", 40, seed=1, words=(6, 40), golds=2)
        write_toy_squad(root / "dev2.json", 30, seed=2, words=(6, 30), unanswerable=0.35)
        finetune(FinetuneConfig.preset("tiny", model=root / "base", task="squad", train_file=root / "train.json",
                                       dev_file=root / "dev.json", out=root / "teacher", epochs=2.0, doc_stride=8))
    return root


def qa_bundle(root: Path) -> Path:
    """The toy teacher exported with fp32 and a portable INT8 graph calibrated on training questions and
    gated on the dev questions (not trained on)."""
    from edgebert.exporters import ExportConfig, export_bundle

    data = toy_qa(root)
    bundle = data / "bundle"
    if not (bundle / "manifest.json").is_file():
        export_bundle(ExportConfig(model_dir=data / "teacher", out_dir=bundle, int8=True, calib=data / "train.json",
                                   calib_size=60, gate_data=data / "dev.json", gate_size=100, validation_batch_sizes=(1, 3),
                                   validation_seq_lens=(7, None)))
    return bundle


def hf_pipeline(model_dir: Path):
    """transformers' question-answering pipeline on ``model_dir`` (its weights and tokenizer.json)."""
    import transformers as tf

    tf.logging.set_verbosity_error()
    model = tf.BertForQuestionAnswering.from_pretrained(model_dir).eval()
    tok = tf.PreTrainedTokenizerFast(tokenizer_file=str(Path(model_dir) / "tokenizer.json"), cls_token="[CLS]",
                                     sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")
    return question_answering_pipeline(model=model, tokenizer=tok)
