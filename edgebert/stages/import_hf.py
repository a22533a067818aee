"""Import a Hugging Face BERT directory as an edgebert checkpoint (``edgebert import-hf``).

edgebert uses Hugging Face parameter names and config.json, so importing is mostly checking: the
source weights are mapped onto the edgebert model of the same architecture (``BertModel``,
``BertForPreTraining``, ``BertForMaskedLM``, ``BertForSequenceClassification`` with its
``id2label``, ``BertForTokenClassification``, ``BertForQuestionAnswering`` (``qa_outputs``),
``BertForMultipleChoice``), and the same heads of DistilBERT, RoBERTa and XLM-RoBERTa (``model_type``
distilbert / roberta / xlm-roberta: their names translated by ``edgebert.model.families``, written back
under them); anything that would silently change the network is
refused (missing encoder or head weights, shapes that disagree with config.json, an untied MLM
decoder, leftover encoder weights such as extra layers), and what is dropped on purpose (buffers
like ``position_ids``, tied copies, heads the chosen architecture has no use for) is reported. A
sentence-transformers directory's pooling (``modules.json``, ``1_Pooling/config.json``, ``Normalize``:
``edgebert.bundle.pooling``) and a CrossEncoder's score activation (``edgebert.bundle.cross_encoder``) are kept
in the checkpoint for ``export``; a pooling edgebert cannot reproduce (a ``Dense`` module, concatenated modes) is
refused, and so is a RoBERTa whose ``pad_token_id`` is not the id its tokenizer pads with (``families.check_pad_id``).

The output directory is written in one go (``atomic_dir``): ``config.json`` + ``model.safetensors`` via ``save_model``,
the tokenizer files, and nothing at all if any step fails. Before it is moved into place, the written checkpoint is
reloaded with ``load_model`` and must give exactly (max abs diff 0) the outputs of the model built from the source.

The other direction needs no converter: every edgebert checkpoint loads with
``transformers.<Arch>.from_pretrained(dir)`` (tested in tests/test_hf_interop.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from edgebert.bundle.cross_encoder import read_cross_encoder, settings_file
from edgebert.bundle.pooling import POOLING_FILES, SentencePooling, read_pooling, write_pooling
from edgebert.bundle.st_settings import ST_SETTINGS_NAME, read_settings
from edgebert.data.hf_tokenizer_files import byte_level_bpe, do_lower_case, tokenizer_config
from edgebert.errors import CheckpointError, ConfigError, EdgebertError, ValidationError
from edgebert.files.atomic import copy_file, write_json, write_text
from edgebert.files.jsonfile import read_json_object
from edgebert.files.outdirs import OutputDir
from edgebert.model.bert import build_model, count_parameters
from edgebert.model.checkpoint import (
    CONFIG_NAME,
    TIED_KEYS,
    WEIGHTS_NAME,
    check_weights,
    load_model,
    map_state_dict,
    model_state_dict,
    read_state_dict,
    save_model,
)
from edgebert.model.config import ARCHITECTURES, BertConfig
from edgebert.model.families import CLASS_PREFIX, MODEL_TYPES, check_pad_id, internal_key, split_architecture, supports

# Tokenizer files copied as they are (tokenizer.json is built from vocab.txt when it is absent).
SENTENCEPIECE_FILES = ("sentencepiece.bpe.model", "spiece.model")   # XLM-R's SentencePiece model, as some folders ship it
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt",   # a byte-level BPE's (RoBERTa), for transformers
                   *SENTENCEPIECE_FILES)
IMPORT_OUTPUTS = (CONFIG_NAME, WEIGHTS_NAME, *TOKENIZER_FILES, *POOLING_FILES, ST_SETTINGS_NAME)
CLASSIFIER_ARCHITECTURES = ("BertForSequenceClassification", "BertForTokenClassification")
# Config keys that describe how the *source* was stored; edgebert always writes float32.
DROPPED_CONFIG_KEYS = ("torch_dtype", "dtype")


@dataclass
class ImportReport:
    """What ``convert_hf`` did: where from and to, what was dropped and why, what was verified."""

    src: Path
    out_dir: Path
    source_architecture: str        # from the source config.json ("architectures"[0])
    architecture: str               # what was written
    num_parameters: int
    weights_file: str               # model.safetensors or pytorch_model.bin
    source_dtypes: list[str]
    dropped: dict[str, str] = field(default_factory=dict)  # source key -> why it was not imported
    tokenizer_files: list[str] = field(default_factory=list)
    tokenizer_built_from_vocab: bool = False
    max_abs_diff: float = 0.0       # reloaded checkpoint vs model built from the source weights
    notes: list[str] = field(default_factory=list)
    pooling: SentencePooling | None = None   # a sentence-transformers model's pooling, kept in the checkpoint


def import_hf(src: str | Path, out_dir: str | Path, *, architecture: str | None = None,
              overwrite: bool = False) -> Path:
    """Import the Hugging Face BERT directory ``src`` into ``out_dir``; returns ``out_dir``."""
    return convert_hf(src, out_dir, architecture=architecture, overwrite=overwrite).out_dir


def convert_hf(src: str | Path, out_dir: str | Path, *, architecture: str | None = None,
               overwrite: bool = False) -> ImportReport:
    """``import_hf`` with the full report (dropped keys, tokenizer files, reload check).

    ``architecture`` overrides the source's (e.g. ``BertModel`` to keep only the encoder of a
    pretraining checkpoint); heads may be dropped this way, never invented.
    ``out_dir`` must be new or empty, or (``overwrite``) an earlier import, which is then replaced as a
    whole; a folder holding other files is refused (``edgebert.files.outdirs``).
    """
    src, out_dir = Path(src), Path(out_dir)
    raw = _read_source_config(src)
    out = _check_out_dir(src, out_dir, overwrite)
    pooling = read_pooling(src)      # sentence-transformers' modules.json: how the model pools (bundle.pooling)
    source_arch = (raw.get("architectures") or [CLASS_PREFIX.get(raw.get("model_type"), "Bert") + "Model"])[0]
    try:
        cfg = BertConfig.from_hf_dict(raw)
    except (ConfigError, TypeError) as exc:
        message = exc.message if isinstance(exc, EdgebertError) else str(exc)
        raise ConfigError(f"{src / CONFIG_NAME}: {message}",
                          getattr(exc, "hint", None)) from exc
    notes = []
    if split_architecture(source_arch)[0] not in ARCHITECTURES:
        notes.append(f"{source_arch} is not an edgebert architecture: imported as {cfg.hf_architecture} "
                     "(the encoder)")
    arch = split_architecture(architecture)[0] if architecture else cfg.architecture
    if arch not in ARCHITECTURES:
        raise ConfigError(f"unknown architecture {arch!r}", f"use one of {', '.join(ARCHITECTURES)}")
    if not supports(arch, cfg.model_type):
        raise ConfigError(f"{arch} has no {cfg.model_type} form", "import it as one its family has, e.g. BertModel")
    cross_encoder = read_cross_encoder(src, cfg.num_labels) if arch.endswith("ForSequenceClassification") else None
    weights_file = WEIGHTS_NAME if (src / WEIGHTS_NAME).exists() else "pytorch_model.bin"
    sd = _read_source_weights(src)
    cfg = _fit_config(cfg, arch, sd)

    model = build_model(cfg, arch)
    target_of = _source_to_target(sd, model)
    dropped = _explain_dropped(sd, target_of, arch, src, cfg.model_type)
    _check_missing_and_shapes(sd, target_of, model, src)
    check_weights({key: sd[key] for key in target_of}, src / weights_file)
    with torch.no_grad():
        params = model.state_dict()
        for key, target in target_of.items():
            params[target].copy_(sd[key])
    model.eval()
    source_dtypes = sorted({str(sd[k].dtype).removeprefix("torch.") for k in target_of})
    del sd  # the model holds the weights now; keep peak memory at two copies for large models

    with out.staged() as tmp:
        save_model(model, tmp)
        tokenizer_files, built = _write_tokenizer(src, tmp, cfg)
        _check_pad_id(cfg, tmp, src)
        if pooling is not None:
            write_pooling(tmp, pooling, cfg.hidden_size, write_text, src)
        if cross_encoder is not None:           # its activation, where sentence-transformers 6 reads it
            write_json(tmp / ST_SETTINGS_NAME, settings_file(cross_encoder["activation"]))
            notes.append(f"a CrossEncoder: {cross_encoder['activation']} scores ({cross_encoder['stated_in']})")
        elif read_settings(src) is not None:    # prompts, similarity function: checked, then kept as written
            copy_file(src / ST_SETTINGS_NAME, tmp / ST_SETTINGS_NAME)
        diff = _verify_reload(model, tmp)
    if not tokenizer_files:
        notes.append(f"{src} has no tokenizer files: add tokenizer.json or vocab.txt to {out_dir}")
    return ImportReport(
        src=src, out_dir=out_dir, source_architecture=source_arch, architecture=arch,
        num_parameters=count_parameters(model), weights_file=weights_file,
        source_dtypes=source_dtypes,
        dropped=dropped, tokenizer_files=tokenizer_files, tokenizer_built_from_vocab=built,
        max_abs_diff=diff, notes=notes, pooling=pooling)


# --------------------------------------------------------------------------- reading the source
def _read_source_config(src: Path) -> dict:
    if not src.exists():
        raise CheckpointError(f"{src} not found", "pass a Hugging Face BERT directory")
    if not src.is_dir():
        raise CheckpointError(f"{src} is not a directory",
                              "pass the directory holding config.json and the weights")
    path = src / CONFIG_NAME
    if not path.is_file():
        raise CheckpointError(f"no {CONFIG_NAME} in {src}",
                              "pass a Hugging Face BERT directory (config.json + model.safetensors "
                              "or pytorch_model.bin)")
    raw = read_json_object(path)
    if "model_type" in raw and raw["model_type"] not in MODEL_TYPES:
        raise ConfigError(f"{path}: model_type={raw['model_type']!r} is not a BERT",
                          f"edgebert imports checkpoints of {', '.join(MODEL_TYPES)} only")
    return raw


def _read_source_weights(src: Path) -> dict[str, torch.Tensor]:
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (src / index).exists() and not (src / index.removesuffix(".index.json")).exists():
            raise CheckpointError(f"{src} holds a sharded checkpoint ({index})",
                                  "merge the shards into one model.safetensors first")
    sd = read_state_dict(src)
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"{src}: weight {bad[0]} is not a tensor", "the checkpoint is corrupt")
    return sd


def _fit_config(cfg: BertConfig, arch: str, sd: dict[str, torch.Tensor]) -> BertConfig:
    """The config to build: ``arch``, labels for classifier heads, float32 storage."""
    extra = {k: v for k, v in cfg.extra.items() if k not in DROPPED_CONFIG_KEYS}
    id2label = cfg.id2label
    if arch in CLASSIFIER_ARCHITECTURES:
        if id2label is None and "classifier.weight" in sd:  # labels unnamed: LABEL_i, as transformers
            id2label = {i: f"LABEL_{i}" for i in range(sd["classifier.weight"].shape[0])}
    else:
        id2label = None
    return cfg.replace(architecture=arch, id2label=id2label, extra=extra)


# --------------------------------------------------------------------------- key mapping
def _source_to_target(sd: dict[str, torch.Tensor], model: nn.Module) -> dict[str, str]:
    """Source key -> model key, by the same rules ``load_model`` applies (``map_state_dict``).

    ``map_state_dict`` is run on placeholders that carry each key's index, so renames (legacy
    gamma/beta), the ``bert.`` prefix handling and what it drops stay defined in one place.
    """
    keys = list(sd)
    probe = {k: torch.tensor(i) for i, k in enumerate(keys)}
    mapped, _ = map_state_dict(probe, model)
    return {keys[int(v)]: target for target, v in mapped.items()}


def _is_encoder(key: str) -> bool:
    return key.removeprefix("bert.").startswith(("embeddings.", "encoder."))


def _explain_dropped(sd: dict[str, torch.Tensor], target_of: dict[str, str], arch: str,
                     src: Path, model_type: str = "bert") -> dict[str, str]:
    """Why each unused source key is unused; refuse where dropping it would change the network.
    Keys are judged by their edgebert names (``families.internal_key``), reported by the source's."""
    names = {internal_key(k, model_type, arch): k for k in sd}
    word_emb = next((sd[k] for n, k in names.items() if n.endswith("embeddings.word_embeddings.weight")), None)
    mlm_bias = sd.get(names.get("cls.predictions.bias", ""))
    dropped: dict[str, str] = {}
    for key, value in sd.items():
        if key in target_of:
            continue
        source_key, key = key, internal_key(key, model_type, arch)
        if key.endswith("position_ids"):
            dropped[source_key] = "buffer, recomputed by the model"
        elif key in TIED_KEYS and not arch.endswith(("PreTraining", "MaskedLM")):
            dropped[source_key] = f"MLM head, not part of {arch}"
        elif key == "cls.predictions.decoder.weight":
            if word_emb is not None and not torch.equal(value, word_emb):
                raise CheckpointError(f"{src}: the MLM decoder weight differs from the word embeddings",
                                      "edgebert ties them (as BERT does); untied decoders are not "
                                      "supported")
            dropped[source_key] = "tied to embeddings.word_embeddings.weight"
        elif key == "cls.predictions.decoder.bias":
            if mlm_bias is not None and not torch.equal(value, mlm_bias):
                raise CheckpointError(f"{src}: cls.predictions.decoder.bias differs from "
                                      "cls.predictions.bias", "the checkpoint is inconsistent")
            dropped[source_key] = "tied to cls.predictions.bias"
        elif _is_encoder(key):
            raise CheckpointError(f"{src}: encoder weight {source_key} has no place in the model config.json "
                                  f"describes (e.g. more layers than num_hidden_layers)",
                                  "the config and weights come from different models")
        elif key.removeprefix("bert.").startswith("pooler."):
            dropped[source_key] = f"pooler, not part of {arch}"
        elif key.startswith(("cls.", "classifier.", "qa_outputs.")):
            dropped[source_key] = f"head, not part of {arch}"
        else:
            dropped[source_key] = "not a BERT weight edgebert knows"
    return dropped


def _check_missing_and_shapes(sd: dict[str, torch.Tensor], target_of: dict[str, str],
                              model: nn.Module, src: Path) -> None:
    wanted = model_state_dict(model)
    missing = sorted(set(wanted) - set(target_of.values()))
    encoder_missing = [k for k in missing if _is_encoder(k)]
    if encoder_missing:
        raise CheckpointError(f"{src} lacks encoder weights, e.g. {encoder_missing[0]} "
                              f"({len(encoder_missing)} missing)", "the checkpoint is incomplete")
    if missing:
        raise CheckpointError(f"{src} has no weights for {missing[0]} ({len(missing)} missing) "
                              f"as {type(model).__name__}",
                              "import it as the architecture it was saved as, or as BertModel "
                              "(--architecture BertModel)")
    wrong = [(k, tuple(sd[k].shape), tuple(wanted[t].shape)) for k, t in target_of.items()
             if sd[k].shape != wanted[t].shape]
    if wrong:
        key, got, want = wrong[0]
        raise CheckpointError(f"{src}: {len(wrong)} weight(s) do not fit config.json, e.g. {key} "
                              f"has shape {list(got)} where the config needs {list(want)}",
                              "the config and weights come from different models")


# --------------------------------------------------------------------------- writing + checking
def _write_tokenizer(src: Path, out: Path, cfg: BertConfig) -> tuple[list[str], bool]:
    """Copy the tokenizer files; build tokenizer.json from vocab.txt (WordPiece) or vocab.json + merges.txt
    (a byte-level BPE: RoBERTa) when it is absent."""
    copied = []
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            copy_file(src / name, out / name)
            copied.append(name)
    built = False
    if "tokenizer.json" not in copied and "vocab.txt" in copied:
        from edgebert.data.tokenizer import load_vocab_tokenizer

        tok = load_vocab_tokenizer(out / "vocab.txt", lowercase=do_lower_case(src))
        write_text(out / "tokenizer.json", tok.to_str())
        copied.insert(0, "tokenizer.json")
        built = True
    elif "tokenizer.json" not in copied and {"vocab.json", "merges.txt"} <= set(copied):
        write_text(out / "tokenizer.json", byte_level_bpe(out, tokenizer_config(src)).to_str())
        copied.insert(0, "tokenizer.json")
        built = True
    elif "tokenizer.json" not in copied and set(SENTENCEPIECE_FILES) & set(copied):
        write_text(out / "tokenizer.json", _converted_sentencepiece(src))
        copied.insert(0, "tokenizer.json")
        built = True
    if "tokenizer.json" in copied:
        from tokenizers import Tokenizer

        try:
            size = Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
        except Exception as exc:  # tokenizers raises plain Exceptions for unreadable files
            raise CheckpointError(f"{src}/tokenizer.json is not a readable tokenizer ({exc})") from exc
        if size > cfg.vocab_size:
            raise CheckpointError(f"{src}: the tokenizer has {size} tokens but the model only "
                                  f"{cfg.vocab_size} embeddings",
                                  "the tokenizer and weights come from different models")
    return copied, built


def _check_pad_id(cfg: BertConfig, out: Path, src: Path) -> None:
    """A RoBERTa's config pad_token_id must be the id its tokenizer pads with (``families.check_pad_id``)."""
    if cfg.position_offset and (out / "tokenizer.json").is_file():
        from edgebert.exporters.tokenizer_info import tokenizer_metadata

        check_pad_id(cfg.model_type, cfg.pad_token_id, tokenizer_metadata(out / "tokenizer.json")["pad_id"], str(src))


def _converted_sentencepiece(src: Path) -> str:
    """tokenizer.json from a SentencePiece model (XLM-R's ``sentencepiece.bpe.model``), converted by transformers
    as its fast tokenizer converts it (needs the ``sentencepiece`` and ``protobuf`` packages)."""
    try:
        import transformers

        fast = transformers.AutoTokenizer.from_pretrained(str(src), use_fast=True)
        return fast.backend_tokenizer.to_str()
    except Exception as exc:  # noqa: BLE001  (missing sentencepiece / protobuf, or an unreadable model)
        name = next(n for n in SENTENCEPIECE_FILES if (src / n).is_file())
        raise CheckpointError(f"{src}/{name} is a SentencePiece model and the folder has no tokenizer.json; converting "
                              f"it failed ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})",
                              "pip install sentencepiece protobuf transformers, or add the tokenizer.json that "
                              "transformers' AutoTokenizer.from_pretrained(folder).save_pretrained(folder) writes") from exc


def probe_batch(cfg: BertConfig, batch: int = 2, seq: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    """A seeded batch with padding (row 1 half padded) and two segments, for output comparisons
    (a multiple-choice model gets it as one question with ``batch`` choices: (1, batch, seq)); at most the
    tokens the position table serves (RoBERTa's first pad_token_id + 1 rows are no token's)."""
    seq = min(seq, cfg.max_sequence_length)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1:, seq // 2:] = 0
    types = torch.zeros(batch, seq, dtype=torch.long)
    if cfg.type_vocab_size > 1:
        types[:, seq // 2:] = 1
    tensors = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if cfg.architecture == "BertForMultipleChoice":
        tensors = {k: v[None] for k, v in tensors.items()}
    return tensors


def output_tensors(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every tensor a forward pass returns (encoder states, pooler, head logits), by name."""
    with torch.no_grad():
        out = model(**batch)
    enc = getattr(out, "encoder", out)
    tensors = {"last_hidden_state": enc.last_hidden_state}
    if enc.pooler_output is not None:
        tensors["pooler_output"] = enc.pooler_output
    for name in ("logits", "prediction_logits", "seq_relationship_logits", "start_logits", "end_logits"):
        if isinstance(getattr(out, name, None), torch.Tensor):
            tensors[name] = getattr(out, name)
    return tensors


def _verify_reload(model: nn.Module, out: Path) -> float:
    """Reload ``out`` with ``load_model``; weights and outputs must equal the in-memory model's."""
    reloaded = load_model(out)
    if type(reloaded) is not type(model):
        raise ValidationError(f"{out} reloads as {type(reloaded).__name__}, not {type(model).__name__}")
    batch = probe_batch(model.config)
    ref, got = output_tensors(model, batch), output_tensors(reloaded, batch)
    diff = max(float((ref[k] - got[k]).abs().max()) for k in ref)
    if diff != 0.0 or ref.keys() != got.keys():
        raise ValidationError(f"the written checkpoint does not reproduce the source outputs "
                              f"(max abs diff {diff:.3g})", "report this as a bug",
                              figures={"max_abs_diff": diff, "tolerance": 0.0})
    return diff


def _check_out_dir(src: Path, out_dir: Path, overwrite: bool) -> OutputDir:
    s, o = src.resolve(), out_dir.resolve()
    if o == s or s.is_relative_to(o):
        raise CheckpointError(f"--out {out_dir} would replace the source {src}",
                              "choose another output directory")
    return OutputDir(out_dir, "import-hf", names=IMPORT_OUTPUTS, overwrite=overwrite, signature=WEIGHTS_NAME,
                     flags="--overwrite")
