"""Serve the example page and edgebert bundles from 127.0.0.1, cross-origin isolated (COOP/COEP headers, so
onnxruntime-web may run WASM on several threads).

    python examples/web/serve.py BUNDLE [NAME=BUNDLE ...] [--port 8000]

The page and examples/web/node_modules are served at ``/``, each bundle at ``/models/<NAME>/`` (a bare
BUNDLE is served as ``embed``); open http://127.0.0.1:8000/?embed=embed&qa=qa. Stdlib only; local files,
no CDN. Prints ``serving http://127.0.0.1:PORT/`` once listening (``--port 0``: a free port).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
from pathlib import Path

WEB = Path(__file__).resolve().parent
ISOLATION = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
             "Cross-Origin-Resource-Policy": "same-origin", "Cache-Control": "no-store"}


class Handler(http.server.SimpleHTTPRequestHandler):
    """Static files with the isolation headers; ``/models/<name>/...`` from that bundle's folder."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".js": "text/javascript", ".wasm": "application/wasm", ".onnx": "application/octet-stream",
                      ".json": "application/json"}

    def __init__(self, *args, models: dict[str, Path], **kwargs):
        self.models = models
        super().__init__(*args, directory=str(WEB), **kwargs)

    def translate_path(self, path: str) -> str:
        parts = path.split("?", 1)[0].split("#", 1)[0].split("/")
        if len(parts) > 3 and parts[1] == "models" and parts[2] in self.models:
            root = self.models[parts[2]]
            target = (root / "/".join(parts[3:])).resolve()
            return str(target) if target.is_relative_to(root) else str(root / "missing")
        return super().translate_path(path)

    def end_headers(self) -> None:
        for key, value in ISOLATION.items():
            self.send_header(key, value)
        super().end_headers()

    def log_message(self, format: str, *args) -> None:   # quiet: a test reads stdout for the address
        pass


def parse_models(items: list[str]) -> dict[str, Path]:
    models = {}
    for item in items:
        name, _, path = item.rpartition("=") if "=" in item else ("embed", "", item)
        folder = Path(path).resolve()
        if not (folder / "config.json").is_file():
            sys.exit(f"serve.py: {folder} is not a model folder (no config.json): give an edgebert bundle")
        models[name] = folder
    return models


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundles", nargs="+", metavar="[NAME=]BUNDLE")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    handler = functools.partial(Handler, models=parse_models(args.bundles))
    with http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler) as server:
        print(f"serving http://127.0.0.1:{server.server_address[1]}/", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
