"""The pooling a bundle runs with: one answer for ``EdgeSession`` and for sentence-transformers opening the
same folder (``SentenceTransformer(bundle, backend="onnx")``). Stdlib only.

A bundle tells sentence-transformers how to pool in its own files (``modules.json``, ``1_Pooling/config.json``,
``2_Normalize``, ``sentence_bert_config.json``: ``exporters.hf_folder``). Its manifest's ``pooling`` keeps the
model's own when the model states one, and the files say the same. A model that states none gets edgebert's
default written into those files (mean, then Normalize) and no manifest ``pooling``; a bundle exported before
the files were written has neither (sentence-transformers then pools by mean without Normalize, which is
``vector_pooling.DEFAULT_POOLING``). ``bundle_pooling`` reads them in that order, so that what the bundle's
files tell sentence-transformers is what ``EdgeSession.encode`` / ``embed`` do, for every bundle.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from edgebert.bundle.manifest import Manifest
from edgebert.bundle.pooling import MODULES_NAME, POOLING_DIR, ST_CONFIG_NAME, SentencePooling, read_pooling
from edgebert.bundle.reader import verify_files
from edgebert.errors import BundleError, ConfigError

__all__ = ["FILES_SOURCE", "bundle_pooling"]

FILES_SOURCE = "edgebert's default, in the bundle's modules.json"
_FILES = (MODULES_NAME, f"{POOLING_DIR}/config.json", ST_CONFIG_NAME)


def bundle_pooling(bundle_dir: str | os.PathLike, manifest: Manifest, verify: bool = True) -> SentencePooling | None:
    """The manifest's ``pooling``; else the one the bundle's own ``modules.json`` states (its files hash-checked
    first when ``verify``); else ``None``. ``BundleError`` naming the file when those files do not load."""
    if manifest.pooling is not None or MODULES_NAME not in manifest.files:
        return manifest.pooling
    if verify:
        verify_files(bundle_dir, manifest, [n for n in _FILES if n in manifest.files], stamps=True)
    try:
        stated = read_pooling(bundle_dir)
    except ConfigError as exc:
        raise BundleError(f"{Path(bundle_dir)}: {exc.message}", "re-export the bundle") from None
    return None if stated is None else dataclasses.replace(stated, source=FILES_SOURCE)
