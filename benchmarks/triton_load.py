"""A Triton server on a repository ``edgebert triton-repo`` wrote, and its load: requests/s and p50 / p99 latency.

Two functions, used by the Triton tests and by the scale-out benchmark (it does the timing; this module only
measures when asked):

* ``TritonServer(repos)``: starts the ``tritonserver`` binary that the ``nvidia-pytriton`` wheel ships, from its
  own venv (``.venv-triton``: pytriton needs numpy < 2; ``make triton-venv``), on 127.0.0.1 with free ports, its
  Python backend and the stub for that venv's Python (``args``: more server flags); a context manager that
  stops it. ``TritonUnavailable``
  (with the reason) where it cannot start: no venv, no binary, or the server exits / is not ready in time.
* ``measure(url, model, texts, concurrency)``: ``concurrency`` client threads, each with its own
  ``tritonclient.http`` client, send one text per request (``inputs`` names the text inputs: ``text``, or
  ``question`` + ``context`` for qa) for ``seconds`` after ``warmup`` requests; returns requests/s, p50 / p99
  latency (ms), the request count and the client's CPU count (a client on the server's cores costs it time).

Run as a script: ``python benchmarks/triton_load.py REPO MODEL`` serves REPO and prints the three loads (1, 8, 64).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TRITON_VENV = Path(os.environ.get("EDGEBERT_TRITON_VENV", REPO / ".venv-triton"))
CONCURRENCY = (1, 8, 64)


class TritonUnavailable(RuntimeError):
    """The server cannot run here; the message says why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _venv_facts(venv: Path) -> dict:
    python = venv / "bin" / "python"
    if not python.exists():
        raise TritonUnavailable(f"no Triton venv at {venv} (make triton-venv installs nvidia-pytriton there)")
    code = ("import json, os, sys, sysconfig\n"
            "try:\n import pytriton\nexcept ImportError as e:\n print(json.dumps({'error': str(e)})); sys.exit()\n"
            "print(json.dumps({'pytriton': os.path.dirname(pytriton.__file__), "
            "'libdir': sysconfig.get_config_var('LIBDIR'), 'version': '%d.%d' % sys.version_info[:2]}))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    facts = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {"error": out.stderr[-300:]}
    if "error" in facts:
        raise TritonUnavailable(f"nvidia-pytriton is not importable in {venv}: {facts['error']}")
    return facts


class TritonServer:
    """``with TritonServer([repo]) as server: server.url``; see the module docstring."""

    def __init__(self, repos: list[Path], venv: Path = TRITON_VENV, timeout: float = 180.0, args: tuple = ()):
        self.repos, self.venv, self.timeout, self.args = [Path(r) for r in repos], Path(venv), timeout, tuple(args)
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None

    def __enter__(self) -> "TritonServer":
        facts = _venv_facts(self.venv)
        server = Path(facts["pytriton"]) / "tritonserver"
        binary, stub = server / "bin" / "tritonserver", \
            server / "python_backend_stubs" / facts["version"] / "triton_python_backend_stub"
        if not binary.exists() or not stub.exists():
            raise TritonUnavailable(f"pytriton in {self.venv} has no tritonserver binary or Python {facts['version']} "
                                    "stub")
        self.work = Path(tempfile.mkdtemp(prefix="edgebert-triton-"))
        backend = self.work / "backends" / "python"            # pytriton's layout: the stub beside the backend
        backend.mkdir(parents=True)
        for f in (server / "backends" / "python").iterdir():
            if f.is_file():
                shutil.copy(f, backend / f.name)
        shutil.copy(stub, backend / "triton_python_backend_stub")
        libs = Path(facts["pytriton"]).parent / "nvidia_pytriton.libs"
        env = {**os.environ, "PATH": f"{self.venv / 'bin'}:{os.environ.get('PATH', '')}",
               "LD_LIBRARY_PATH": ":".join(p for p in (facts["libdir"], str(libs), os.environ.get("LD_LIBRARY_PATH"))
                                           if p)}
        self.http_port = _free_port()
        args = [str(binary), *(a for r in self.repos for a in ("--model-repository", str(r))),
                "--backend-directory", str(self.work / "backends"), "--http-address", "127.0.0.1",
                "--http-port", str(self.http_port), "--grpc-address", "127.0.0.1", "--grpc-port", str(_free_port()),
                "--allow-metrics", "false", "--log-verbose", "0", *self.args]
        self.log_path = self.work / "server.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def log_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def _wait_ready(self) -> None:
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.__exit__()
                raise TritonUnavailable(f"tritonserver exited ({self.proc.returncode}): {tail}")
            try:
                with urllib.request.urlopen(f"http://{self.url}/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        tail = self.log_tail()
        self.__exit__()
        raise TritonUnavailable(f"tritonserver was not ready after {self.timeout:.0f} s: {tail}")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "work", None) is not None:
            shutil.rmtree(self.work, ignore_errors=True)


def infer(client, model: str, columns: dict[str, list[str]], outputs: list[str]) -> dict[str, np.ndarray]:
    """One request of n rows ({input: n texts}) -> {output: array}."""
    import tritonclient.http as http

    tensors = []
    for name, texts in columns.items():
        t = http.InferInput(name, [len(texts), 1], "BYTES")
        t.set_data_from_numpy(np.array([[s.encode("utf-8")] for s in texts], dtype=object))
        tensors.append(t)
    result = client.infer(model, tensors, outputs=[http.InferRequestedOutput(n) for n in outputs])
    return {n: result.as_numpy(n) for n in outputs}


def measure(url: str, model: str, texts: list[str] | dict[str, list[str]], concurrency: int, *,
            seconds: float = 10.0, warmup: int = 5) -> dict:
    """Requests/s and latency of ``concurrency`` clients sending one text each per request (see the module
    docstring); ``texts``: a list (the ``text`` input) or {input: texts} (qa: ``question`` + ``context``)."""
    import tritonclient.http as http

    columns = {"text": list(texts)} if isinstance(texts, list) else {k: list(v) for k, v in texts.items()}
    n = len(next(iter(columns.values())))
    meta = http.InferenceServerClient(url).get_model_metadata(model)
    outputs = [o["name"] for o in meta["outputs"]]
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors: list[BaseException] = []
    start_gate, stop = threading.Barrier(concurrency + 1), threading.Event()

    def client_loop(k: int) -> None:
        client = http.InferenceServerClient(url, connection_timeout=120, network_timeout=120)
        i = k
        try:
            for _ in range(warmup):
                infer(client, model, {c: [v[i % n]] for c, v in columns.items()}, outputs)
                i += concurrency
            start_gate.wait()
            while not stop.is_set():
                t0 = time.perf_counter()
                infer(client, model, {c: [v[i % n]] for c, v in columns.items()}, outputs)
                latencies[k].append(time.perf_counter() - t0)
                i += concurrency
        except Exception as exc:            # reported below
            errors.append(exc)
            start_gate.abort()

    workers = [threading.Thread(target=client_loop, args=(k,), daemon=True) for k in range(concurrency)]
    for w in workers:
        w.start()
    try:
        start_gate.wait()
        t0 = time.perf_counter()
        time.sleep(seconds)
    except threading.BrokenBarrierError:
        t0 = time.perf_counter()
    stop.set()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]!r}")
    done = np.array([x for per in latencies for x in per]) * 1000.0
    return {"model": model, "concurrency": concurrency, "requests": int(done.size), "seconds": round(wall, 3),
            "requests_per_s": done.size / wall, "p50_ms": float(np.percentile(done, 50)),
            "p99_ms": float(np.percentile(done, 99)), "client_cpus": os.cpu_count()}


if __name__ == "__main__":
    repo, model = Path(sys.argv[1]), sys.argv[2]
    sample = ["the film was good", "a dull and boring movie with a long plot", "charming"] * 10
    with TritonServer([repo]) as running:
        for c in CONCURRENCY:
            print(json.dumps(measure(running.url, model, sample, c)))
