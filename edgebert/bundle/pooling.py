"""How a model turns token vectors into one sentence vector, as the model itself says (stdlib only).

A sentence-transformers model directory states its pooling: ``modules.json`` lists its modules
(``Transformer`` -> ``Pooling`` -> optional ``Normalize``), the Pooling module's ``config.json`` names
the mode (``pooling_mode: "cls"``, or the older ``pooling_mode_cls_token: true`` ... keys), and
``sentence_bert_config.json`` the token limit sentence-transformers truncates at. ``read_pooling``
reads them into a ``SentencePooling``:

* ``edgebert import-hf`` keeps it in the checkpoint (``write_pooling``: the same three files, so the
  checkpoint still loads with ``SentenceTransformer(dir)``);
* ``edgebert export`` reads it from the model directory (a sentence-transformers one, or an import)
  into the bundle's manifest (``pooling``);
* ``EdgeSession.embed`` / ``encode`` pool that way unless the caller says otherwise, and
  ``edgebert info BUNDLE`` shows it.

A model that says nothing gives ``None`` (the runtime then pools by mean, as before, and says so). A
model whose modules edgebert cannot reproduce (a ``Dense`` layer, several pooling modes concatenated,
``weightedmean`` ...) is a ``ConfigError`` at import / export: its vectors would silently differ. So is
one sentence-transformers would refuse or run in another order (a Pooling folder that is missing or
outside the model folder, no Transformer first, a Normalize before the Pooling, a ``max_seq_length``
that is not a positive integer): one line naming the file, never a silently chosen pooling.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from edgebert.errors import BundleError, ConfigError
from edgebert.files.jsonfile import read_json
from edgebert.records import record

__all__ = ["POOLING_MODES", "SentencePooling", "read_pooling", "write_pooling", "carry_pooling", "POOLING_FILES"]

POOLING_MODES = ("mean", "cls", "max")
MODULES_NAME = "modules.json"
POOLING_DIR = "1_Pooling"
ST_CONFIG_NAME = "sentence_bert_config.json"
POOLING_FILES = (MODULES_NAME, POOLING_DIR, ST_CONFIG_NAME)     # what ``write_pooling`` writes
# the older config keys -> mode (sentence-transformers' own table)
_LEGACY_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
_KNOWN_MODULES = ("Transformer", "Pooling", "Normalize")


@record
class SentencePooling:
    """The model's pooling: ``mode`` (mean | cls | max), whether a ``Normalize`` module follows it,
    whether prompt tokens are pooled (``include_prompt``), and sentence-transformers' token limit."""

    mode: str = "mean"
    normalize: bool = False
    include_prompt: bool = True
    max_seq_length: int | None = None
    source: str = "sentence-transformers"

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "normalize": self.normalize, "include_prompt": self.include_prompt,
                "max_seq_length": self.max_seq_length, "source": self.source}

    def describe(self) -> str:
        """``cls + normalize (sentence-transformers)``: for ``edgebert info`` and ``describe()``."""
        return f"{self.mode}{' + normalize' if self.normalize else ''} ({self.source})"

    @classmethod
    def from_dict(cls, value: Any, where: str = "manifest.json") -> "SentencePooling":
        """A manifest's ``pooling`` object; ``BundleError`` naming ``where`` if it is not one."""
        if not isinstance(value, dict) or value.get("mode") not in POOLING_MODES:
            raise BundleError(f"{where}: pooling must be an object whose mode is one of {', '.join(POOLING_MODES)}",
                              "re-export the bundle")
        limit = value.get("max_seq_length")
        if not all(isinstance(value.get(k, True), bool) for k in ("normalize", "include_prompt")) or not (
                limit is None or (isinstance(limit, int) and not isinstance(limit, bool) and limit > 0)):
            raise BundleError(f"{where}: pooling.normalize / include_prompt must be true or false and "
                              "max_seq_length a positive integer", "re-export the bundle")
        return cls(value["mode"], bool(value.get("normalize", False)), bool(value.get("include_prompt", True)),
                   limit, str(value.get("source") or "sentence-transformers"))


def _json(path: Path) -> Any:
    return read_json(path, hint="restore the sentence-transformers files of the model", error=ConfigError)


def _module_kind(entry: Any, path: Path) -> str:
    kind = entry.get("type") if isinstance(entry, dict) else None
    if not isinstance(kind, str) or not isinstance(entry.get("path", ""), str):
        raise ConfigError(f"{path} lists a module without a type and path: {entry!r}",
                          "restore the model's modules.json")
    return kind.rsplit(".", 1)[-1]


def read_pooling(model_dir: str | os.PathLike) -> SentencePooling | None:
    """The pooling a sentence-transformers directory states (``None``: it has no ``modules.json``).
    ``ConfigError`` naming the file when it states one edgebert cannot reproduce, or one that
    sentence-transformers itself would not load or would run otherwise (``_check_order``,
    ``_pooling_config``, ``_max_seq_length``)."""
    model_dir = Path(model_dir)
    modules_file = model_dir / MODULES_NAME
    if not modules_file.is_file():
        return None
    modules = _json(modules_file)
    if not isinstance(modules, list):
        raise ConfigError(f"{modules_file} must hold a list of modules", "restore the model's modules.json")
    kinds = [(_module_kind(m, modules_file), m) for m in modules]
    if [k for k, _ in kinds] == ["Transformer"]:     # a CrossEncoder (sentence-transformers 6): its head scores, nothing pools
        return None
    other = [k for k, _ in kinds if k not in _KNOWN_MODULES]
    if other:
        raise ConfigError(f"{modules_file} has a {other[0]} module after the encoder; edgebert runs the encoder, "
                          f"one pooling and an optional normalization ({' -> '.join(k for k, _ in kinds)})",
                          "its sentence vectors cannot be reproduced; remove modules.json to import the encoder alone")
    pooling = [m for k, m in kinds if k == "Pooling"]
    if len(pooling) != 1:
        raise ConfigError(f"{modules_file} has {len(pooling)} Pooling modules; edgebert reproduces exactly one",
                          "remove modules.json to import the encoder alone")
    _check_order([k for k, _ in kinds], kinds[0][1], modules_file)
    config_file = _pooling_config(model_dir, pooling[0], modules_file)
    config = _json(config_file)
    if not isinstance(config, dict):
        raise ConfigError(f"{config_file} must hold a JSON object", "restore the model's pooling config")
    mode = _mode(config, config_file)
    limit = _max_seq_length(model_dir / ST_CONFIG_NAME)
    return SentencePooling(mode, any(k == "Normalize" for k, _ in kinds), bool(config.get("include_prompt", True)),
                           limit, f"sentence-transformers {MODULES_NAME}")


def _check_order(kinds: list[str], first: dict, modules_file: Path) -> None:
    """Transformer (the model folder itself) -> Pooling -> Normalize...: the one order whose vectors
    edgebert reproduces; sentence-transformers runs modules in the listed order, so any other order
    (a Normalize before the Pooling, no Transformer) gives other vectors or none."""
    if kinds[0] != "Transformer" or "Transformer" in kinds[1:] or kinds[1] != "Pooling":
        raise ConfigError(f"{modules_file} lists {' -> '.join(kinds)}; edgebert reproduces Transformer -> Pooling "
                          "-> optional Normalize, in that order", "restore the model's modules.json")
    if first.get("path", "") not in ("", "."):
        raise ConfigError(f"{modules_file} puts the Transformer in {first['path']!r}, not the model folder itself, "
                          "which is where edgebert reads the encoder from",
                          "give the folder that holds the Transformer's config.json and weights")


def _pooling_config(model_dir: Path, module: dict, modules_file: Path) -> Path:
    """The Pooling module's ``config.json``: in a sub-folder of ``model_dir`` (never outside it, never
    the model folder itself), and present (sentence-transformers cannot build a Pooling without it)."""
    path = module.get("path", "")
    folder = (model_dir / path).resolve()
    if not path or Path(path).is_absolute() or folder == model_dir.resolve() or \
            not folder.is_relative_to(model_dir.resolve()):
        raise ConfigError(f"{modules_file} names {path!r} as the Pooling folder; it must be a folder inside "
                          f"{model_dir}", "restore the model's modules.json, e.g. \"path\": \"1_Pooling\"")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{modules_file} names the Pooling folder {path!r}, but {model_dir / path / 'config.json'} "
                          "is missing",
                          "restore the model's pooling folder, or remove modules.json to import the encoder alone")
    return config_file


def _mode(config: dict[str, Any], where: Path) -> str:
    if "pooling_mode" in config:
        modes = config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else list(modes) if isinstance(modes, list) else [repr(modes)]
    else:   # the older boolean keys; none set means mean, as sentence-transformers reads them
        modes = [mode for key, mode in _LEGACY_KEYS.items() if config.get(key) is True] or ["mean"]
    if len(modes) != 1 or modes[0] not in POOLING_MODES:
        raise ConfigError(f"{where} pools by {' + '.join(map(str, modes))}; edgebert pools by one of "
                          f"{', '.join(POOLING_MODES)}", "its sentence vectors cannot be reproduced")
    return modes[0]


def _max_seq_length(path: Path) -> int | None:
    """sentence-transformers' token limit: ``None`` when unstated (no file, no key, null); a value it
    could not truncate at (-5, "abc", 1.5, true) is a ``ConfigError`` naming the file."""
    if not path.is_file():
        return None
    value = _json(path)
    if not isinstance(value, dict):
        raise ConfigError(f"{path} must hold a JSON object", "restore the model's sentence_bert_config.json")
    limit = value.get("max_seq_length")
    if limit is not None and not (isinstance(limit, int) and not isinstance(limit, bool) and limit > 0):
        raise ConfigError(f"{path}: max_seq_length {limit!r} is not a positive whole number of tokens",
                          "set it to the model's token limit, e.g. 256, or remove the key")
    return limit


def write_pooling(folder: str | os.PathLike, pooling: SentencePooling, hidden_size: int,
                  write_text: Callable[[Path, str], None], source_dir: str | os.PathLike | None = None) -> list[str]:
    """Write ``pooling`` into ``folder`` as sentence-transformers lays it out (``modules.json``,
    ``1_Pooling/config.json``; ``sentence_bert_config.json`` copied from ``source_dir``, else written
    when there is a token limit), with the caller's atomic ``write_text``; returns the names written."""
    folder = Path(folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": POOLING_DIR, "type": "sentence_transformers.models.Pooling"}]
    if pooling.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    config = {"word_embedding_dimension": hidden_size, "include_prompt": pooling.include_prompt,
              **{key: mode == pooling.mode for key, mode in _LEGACY_KEYS.items()}}
    (folder / POOLING_DIR).mkdir(exist_ok=True)
    write_text(folder / MODULES_NAME, json.dumps(modules, indent=2) + "\n")
    write_text(folder / POOLING_DIR / "config.json", json.dumps(config, indent=2) + "\n")
    names = [MODULES_NAME, f"{POOLING_DIR}/config.json"]
    source = Path(source_dir) / ST_CONFIG_NAME if source_dir is not None else None
    if source is not None and source.is_file():
        write_text(folder / ST_CONFIG_NAME, source.read_text(encoding="utf-8"))
        names.append(ST_CONFIG_NAME)
    elif pooling.max_seq_length is not None:
        write_text(folder / ST_CONFIG_NAME, json.dumps({"max_seq_length": pooling.max_seq_length}, indent=2) + "\n")
        names.append(ST_CONFIG_NAME)
    return names


def carry_pooling(source_dir: str | os.PathLike, folder: str | os.PathLike, hidden_size: int,
                  write_text: Callable[[Path, str], None]) -> list[str]:
    """Keep the sentence-transformers modules of the model in ``source_dir`` in ``folder``, a model
    written from it (a distilled student, a fine-tuned copy): the same pooling, Normalize and token
    limit, so that its bundle encodes as the source does. Returns the names written ([]: none stated)."""
    pooling = read_pooling(source_dir)
    return [] if pooling is None else write_pooling(folder, pooling, hidden_size, write_text, source_dir)
