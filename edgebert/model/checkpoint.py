"""Model directories: ``config.json`` (Hugging Face BertConfig JSON) + ``model.safetensors``.

Weights are stored under Hugging Face names, with the tied MLM decoder weight left out (it is the
word-embedding matrix), so ``transformers.BertForPreTraining.from_pretrained(DIR)`` loads an edgebert
checkpoint and ``load_model`` loads a Hugging Face one. DistilBERT / RoBERTa checkpoints keep their
family's names on disk (``families``: translated here, on the way in and out). Tokenizer files live beside them (see
``edgebert.tokenizer``). Every file is written atomically; weights are never unpickled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from edgebert.errors import CheckpointError
from edgebert.files.atomic import atomic_path
from edgebert.model.bert import MODEL_CLASSES, build_model
from edgebert.model.config import BertConfig
from edgebert.model.families import hf_key, internal_key

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
MODEL_OUTPUTS = (CONFIG_NAME, WEIGHTS_NAME)   # what save_model writes
TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
# Keys some checkpoints carry that are buffers or tied copies, never real weights.
IGNORED_KEYS = ("embeddings.position_ids",)


@dataclass
class LoadReport:
    """What happened when a checkpoint was mapped onto a model."""

    missing: list[str] = field(default_factory=list)      # newly initialised in the model
    unexpected: list[str] = field(default_factory=list)   # in the checkpoint, not used


def model_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """State dict without tied duplicates, contiguous, ready for safetensors."""
    sd = model.state_dict()
    return {k: v.detach().contiguous().cpu() for k, v in sd.items() if k not in TIED_KEYS}


def save_model(model: nn.Module, out_dir: str | Path, config: BertConfig | None = None) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``out_dir`` (each atomically)."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = config or model.config
    arch = type(model).__name__
    if arch not in MODEL_CLASSES:
        raise CheckpointError(f"cannot save a {arch}", "save one of the edgebert BERT classes")
    weights = {hf_key(k, cfg.model_type, arch): v for k, v in model_state_dict(model).items()}
    with atomic_path(out_dir / WEIGHTS_NAME) as tmp:
        save_file(weights, str(tmp), metadata={"format": "pt"})
    cfg.replace(architecture=arch).save(out_dir / CONFIG_NAME)
    return out_dir


def read_state_dict(model_dir: str | Path) -> dict[str, torch.Tensor]:
    """Weights of a model directory: model.safetensors, else pytorch_model.bin (weights_only)."""
    model_dir = Path(model_dir)
    st, binf = model_dir / WEIGHTS_NAME, model_dir / "pytorch_model.bin"
    if st.exists():
        from safetensors.torch import load_file

        try:
            return load_file(str(st))
        except Exception as exc:  # safetensors raises its own error types; all mean "corrupt"
            raise CheckpointError(f"{st} is not a readable safetensors file ({exc})",
                                  "re-create or re-download the checkpoint") from exc
    if binf.exists():
        try:
            sd = torch.load(binf, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise CheckpointError(f"{binf} could not be loaded with weights_only=True ({exc})",
                                  "convert it to safetensors") from exc
        if not isinstance(sd, dict):
            raise CheckpointError(f"{binf} does not hold a state dict")
        return sd
    raise CheckpointError(f"no {WEIGHTS_NAME} or pytorch_model.bin in {model_dir}",
                          "pass a directory written by edgebert or a Hugging Face BERT directory")


FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def check_weights(sd: dict[str, torch.Tensor], where: str | Path) -> None:
    """``CheckpointError`` unless every weight is floating point and finite: an integer tensor would be
    cast silently, and NaN/inf weights give NaN outputs (a NaN perplexity, a NaN picture)."""
    for key, value in sd.items():
        if value.dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"{where}: weight {key} is {str(value.dtype).removeprefix('torch.')}, "
                                  "not floating point", "the checkpoint is corrupt; re-create or re-download it")
        if not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            raise CheckpointError(f"{where}: weight {key} holds {bad} NaN or infinite value(s)",
                                  "the checkpoint is corrupt (a diverged run?); use an earlier checkpoint")


def _normalise_keys(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Legacy TF-style names (LayerNorm.gamma/beta) -> weight/bias; drop buffers."""
    out = {}
    for k, v in sd.items():
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if k.endswith(IGNORED_KEYS) or k in TIED_KEYS:
            continue
        out[k] = v
    return out


def map_state_dict(sd: dict[str, torch.Tensor], model: nn.Module) -> tuple[dict[str, torch.Tensor], LoadReport]:
    """Align checkpoint keys with ``model``: the family's names to edgebert's, add or strip the ``bert.``
    prefix as needed."""
    cfg = model.config
    sd = _normalise_keys({internal_key(k, cfg.model_type, cfg.architecture): v for k, v in sd.items()})
    wanted = set(model_state_dict(model))
    model_has_prefix = any(k.startswith("bert.") for k in wanted)
    ckpt_has_prefix = any(k.startswith("bert.") for k in sd)
    if model_has_prefix and not ckpt_has_prefix:
        sd = {f"bert.{k}": v for k, v in sd.items()}
    elif ckpt_has_prefix and not model_has_prefix:
        sd = {k[len("bert."):]: v for k, v in sd.items() if k.startswith("bert.")}
    report = LoadReport(missing=sorted(wanted - set(sd)), unexpected=sorted(set(sd) - wanted))
    return {k: v for k, v in sd.items() if k in wanted}, report


def _is_encoder_key(key: str) -> bool:
    return key.removeprefix("bert.").startswith(("embeddings.", "encoder."))


def load_model(model_dir: str | Path, architecture: str | None = None, *,
               allow_new_heads: bool = False, config_overrides: dict | None = None) -> nn.Module:
    """Load a model directory as ``architecture`` (default: the one in its config.json).

    Loading into another head (e.g. a pretraining checkpoint as ``BertForSequenceClassification``)
    needs ``allow_new_heads=True``; then only head weights may be missing. Encoder weights must
    always be present, and shapes must match. The report is in ``model.load_report``.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"model directory {model_dir} not found",
                              "pass a directory written by edgebert pretrain/import-hf")
    cfg = BertConfig.load(model_dir / CONFIG_NAME)
    if config_overrides:
        cfg = cfg.replace(**config_overrides)
    sd = read_state_dict(model_dir)
    model = build_model(cfg, architecture)
    mapped, report = map_state_dict(sd, model)
    check_weights(mapped, model_dir / WEIGHTS_NAME if (model_dir / WEIGHTS_NAME).exists() else model_dir)
    encoder_missing = [k for k in report.missing if _is_encoder_key(k)]
    if encoder_missing:
        raise CheckpointError(f"{model_dir} lacks encoder weights, e.g. {encoder_missing[0]} "
                              f"({len(encoder_missing)} missing)", "the checkpoint is incomplete")
    if report.missing and not allow_new_heads:
        raise CheckpointError(f"{model_dir} has no weights for {report.missing[0]} "
                              f"({len(report.missing)} missing) as {type(model).__name__}",
                              "load it with the architecture it was saved as")
    try:
        model.load_state_dict(mapped, strict=False)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[-1].strip()
        raise CheckpointError(f"{model_dir}: weights do not fit config.json ({first})",
                              "the config and weights come from different models") from exc
    model.load_report = report
    model.eval()
    return model
