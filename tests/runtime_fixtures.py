"""Tiny seeded model directories and bundles for the runtime, bench and attention-map tests.

Not a test module (pytest collects ``test_*.py`` only). A bundle is built once per test session and
reused through a marker file under pytest's base temp dir, so the runtime and bench tests share it.
"""

from __future__ import annotations

import os
import string
import sys
from pathlib import Path

READY_BUNDLES = "EDGEBERT_TEST_BUNDLES"

# Words the tiny WordPiece vocabulary knows whole; anything else falls back to characters.
WORDS = """the a an and or but not no is are was were be been it its this that these those i you he
she we they me him her us them my your his our their of to in on at by for with from as into over
under after before about than then so very too more most less film movie story good bad great best
worst funny dull boring charming moving love loved hate fun time year day way man woman people
life world work make made makes see seen watch watched one two three first last new old long short
little big own other same such only just also even still well back much many some all any each
every both few there here when where why how what who which while if because can could will would
should may might must do does did done have has had get got go goes went come came take took give
gave think thought know knew say said tell told feel felt seem seemed look looked cast plot scene
scenes actor actors director script performance performances character characters comedy drama
action music end ending beautiful terrible wonderful awful perfect mess heart mind""".split()

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_vocab() -> list[str]:
    chars = list(string.ascii_lowercase + string.digits + ".,'!?-;:\"()")
    vocab = SPECIALS + chars + [f"##{c}" for c in string.ascii_lowercase + string.digits]
    return vocab + [w for w in dict.fromkeys(WORDS) if w not in vocab]


def make_tiny_tokenizer(path: str | Path) -> Path:
    """A BERT-style WordPiece tokenizer.json (lowercasing, [CLS] A [SEP] B [SEP]) with ~300 tokens."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {tok: i for i, tok in enumerate(tiny_vocab())}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(SPECIALS)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def make_tiny_model_dir(out_dir: str | Path, architecture: str = "BertModel", seed: int = 0,
                        **overrides) -> Path:
    """A seeded tiny BERT (hidden 64, 2 layers) saved with ``save_model`` + a tiny tokenizer.json; the test
    is skipped in a torch-free install (the runtime tests there use ready-made bundles)."""
    import pytest

    torch = pytest.importorskip("torch", reason="the tiny model is made with torch (not installed here)")

    from edgebert.model import BertConfig, build_model, save_model

    extra = {"id2label": {0: "negative", 1: "positive"}} if architecture == "BertForSequenceClassification" else {}
    cfg = BertConfig.preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                            **{"vocab_size": len(tiny_vocab()), **extra, **overrides})
    torch.manual_seed(seed)
    model = build_model(cfg, architecture).eval()
    out_dir = Path(out_dir)
    save_model(model, out_dir)
    make_tiny_tokenizer(out_dir / "tokenizer.json")
    return out_dir


TASK_ARCHITECTURE = {"embed": "BertModel", "mlm": "BertForMaskedLM", "cls": "BertForSequenceClassification"}


def tiny_bundle(root: Path, task: str = "embed") -> tuple[Path, Path]:
    """(model_dir, bundle_dir) of a tiny seeded model of ``task`` with fp32 + int8, built once per
    ``root`` (pass ``tmp_path_factory.getbasetemp()`` to share it across test modules). In a torch-free
    install (``make test-runtime``) the bundles come ready-made from ``$EDGEBERT_TEST_BUNDLES`` (this
    file run as a script, by an install that has torch)."""
    ready = os.environ.get(READY_BUNDLES)
    if ready and (Path(ready) / f"tiny_{task}_bundle" / "manifest.json").is_file():
        root = Path(ready)
    model_dir = Path(root) / f"tiny_{task}_model"
    bundle_dir = Path(root) / f"tiny_{task}_bundle"
    if not (bundle_dir / "manifest.json").is_file():
        make_tiny_model_dir(model_dir, TASK_ARCHITECTURE[task])
        _export(model_dir, bundle_dir, task)
    return model_dir, bundle_dir



def _export(model_dir: Path, bundle_dir: Path, task: str) -> None:
    """The real exporter (fp32 fused + dynamic INT8), with a light validation grid to stay fast."""
    from edgebert.exporters import ExportConfig, export_bundle

    export_bundle(ExportConfig(model_dir=model_dir, out_dir=bundle_dir, task=task, int8=True,
                               validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))


GPU_PROFILE = "min=1x1,opt=4x32,max=16x128"


def tiny_gpu_bundle(root: Path) -> tuple[Path, Path]:
    """(model_dir, bundle_dir) of a tiny BertModel with every graph: fused fp32, CPU INT8 (portable),
    the TensorRT graphs (standard ops fp32 + QDQ INT8, profile ``GPU_PROFILE``) and the CUDA graphs
    (fp32 + fp16, 1-D mask index); built once per ``root``."""
    from edgebert.exporters import ExportConfig, export_bundle
    from export_fixtures import make_calib_text

    model_dir = Path(root) / "tiny_gpu_model"
    bundle_dir = Path(root) / "tiny_gpu_bundle"
    if not (bundle_dir / "manifest.json").is_file():
        make_tiny_model_dir(model_dir, "BertModel", seed=3)
        calib = make_calib_text(Path(root) / "tiny_gpu_calib.txt", n=80)
        export_bundle(ExportConfig(model_dir=model_dir, out_dir=bundle_dir, int8=True, tensorrt=True, cuda=True,
                                   calib=calib, calib_size=40, gate_size=40, trt_profile=GPU_PROFILE,
                                   validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    return model_dir, bundle_dir


if __name__ == "__main__":
    # python tests/runtime_fixtures.py DIR: the tiny bundles, made here (torch) for a torch-free test run
    out = Path(sys.argv[1])
    for name in TASK_ARCHITECTURE:
        tiny_bundle(out, name)
    print(f"tiny bundles in {out}: {', '.join(TASK_ARCHITECTURE)}")
