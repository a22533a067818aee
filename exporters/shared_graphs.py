"""One file per distinct graph: targets whose graphs came out byte-equal share one file.

Two INT8 targets often quantize to the same bytes (``x86-vnni`` and ``arm64`` run the same 8-bit
recipe); a bundle keeps the first file, deletes the copies and points every entry at the kept one, so
no byte is stored twice in the folder or in its archive. Each sharing entry names the others in
``same_graph_as`` (old bundles, one file per entry, read as before). Only plain ONNX files are shared
(never a graph with external data or an OpenVINO IR, whose weights file sits beside it).
"""

from __future__ import annotations

from pathlib import Path

from edgebert.files.hashing import sha256_file

__all__ = ["share_equal_graphs"]


def share_equal_graphs(folder: Path, models: dict[str, dict]) -> dict[str, dict]:
    """``models`` with entries whose graph files hold the same bytes pointed at one file (the first in
    manifest order); the duplicates are deleted from ``folder``. Entries are new dicts."""
    kept: dict[str, str] = {}            # sha256 -> the file kept
    users: dict[str, list[str]] = {}     # kept file -> model keys using it
    out = {k: dict(e) for k, e in models.items()}
    for key, entry in out.items():
        path = Path(folder) / entry["file"]
        if path.suffix != ".onnx" or entry.get("weights") or not path.is_file() \
                or any(path.parent.glob(f"{path.name}.*")):         # external data beside it: keep as is
            continue
        digest = sha256_file(path)
        first = kept.setdefault(digest, entry["file"])
        if first != entry["file"]:
            path.unlink()
            entry["file"] = first
        users.setdefault(first, []).append(key)
    for file, keys in users.items():
        if len(keys) > 1:
            for key in keys:
                out[key]["same_graph_as"] = [k for k in keys if k != key]
    return out

