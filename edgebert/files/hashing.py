"""sha256 of a file, read in 1 MiB blocks (stdlib only: what opening a bundle needs, without the write helpers)."""

from __future__ import annotations

import os


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    import hashlib  # here: a session whose files are all stamped (files.stamps) hashes nothing, loads no OpenSSL

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()
