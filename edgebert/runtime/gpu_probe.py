"""Can the CUDA / TensorRT execution provider run here? Facts first, then a verdict with the reason.

``onnxruntime-gpu`` lists TensorRT and CUDA as *available* on any Linux x86-64 machine, GPU or not. So
each GPU provider is probed before a session is built, in this order:

1. ``onnxruntime.preload_dlls()`` (stdout captured): loads the CUDA / cuDNN libraries of pip's
   ``nvidia-*`` packages, so whether they are found no longer depends on whether torch was imported
   first; for TensorRT the libraries of pip's ``tensorrt`` package (``tensorrt_libs``) are loaded too.
2. The NVIDIA driver (``libcuda.so.1``): it must load, support the CUDA major version this
   onnxruntime build needs (``onnxruntime.cuda_version``), initialise (``cuInit``) and see at least one
   device (``cuDeviceGetCount``): "CUDA failure 100" (no device) and "35" (driver too old) end here.
3. onnxruntime's provider library must load: *any* loader error (a missing dependency, an undefined
   symbol) makes the provider unavailable, with the loader's message.

The verdict is ``assess``'s, a pure function of the facts (tested with simulated facts). Whatever
slips through (a GPU that initialises but cannot run the graph) is caught when the session is built
(``edgebert.runtime.attempts``). The verdict's type, ``ProviderStatus``, lives in ``runtime.provider_status``;
``runtime.providers`` (which answers for the CPU itself) loads this probe only in a build with a GPU provider.
Torch-free: ctypes and onnxruntime only.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import io
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from edgebert.records import record
from edgebert.runtime.provider_status import ORT_PROVIDER_NAMES, ProviderStatus, not_in_build

CUDA_SUCCESS = 0
_CUDA_ERRORS = {100: "no CUDA-capable device is detected", 35: "CUDA driver version is insufficient for "
                "the CUDA runtime version", 999: "unknown error", 3: "initialization error",
                101: "invalid device ordinal"}
@record
class CudaDriver:
    """What ``libcuda.so.1`` says: loader error, supported CUDA version, cuInit result, device count."""

    load_error: str | None = None
    version: int | None = None            # cuDriverGetVersion: 13000 = CUDA 13.0
    init_error: str | None = None         # "CUDA failure 100: no CUDA-capable device is detected"
    devices: int | None = None
    names: tuple[str, ...] = ()

    @property
    def cuda(self) -> str | None:
        return None if self.version is None else f"{self.version // 1000}.{self.version % 1000 // 10}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "names": list(self.names), "cuda": self.cuda}


def _cuda_failure(code: int) -> str:
    return f"CUDA failure {code}: {_CUDA_ERRORS.get(code, 'see the CUDA driver API error codes')}"


def read_cuda_driver() -> CudaDriver:
    """Load ``libcuda.so.1`` and ask it for its version, then initialise it and count devices."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return CudaDriver(load_error=str(exc))
    version = ctypes.c_int(0)
    got_version = lib.cuDriverGetVersion(ctypes.byref(version)) == CUDA_SUCCESS
    code = lib.cuInit(0)
    if code != CUDA_SUCCESS:
        return CudaDriver(version=version.value if got_version else None, init_error=_cuda_failure(code))
    count = ctypes.c_int(0)
    code = lib.cuDeviceGetCount(ctypes.byref(count))
    if code != CUDA_SUCCESS:
        return CudaDriver(version=version.value if got_version else None, init_error=_cuda_failure(code))
    names = []
    for index in range(count.value):
        device, buf = ctypes.c_int(0), ctypes.create_string_buffer(256)
        if lib.cuDeviceGet(ctypes.byref(device), index) == CUDA_SUCCESS and \
                lib.cuDeviceGetName(buf, 256, device) == CUDA_SUCCESS:
            names.append(buf.value.decode(errors="replace"))
    return CudaDriver(version=version.value if got_version else None, devices=count.value, names=tuple(names))


def _ort_capi_dir() -> Path:
    import onnxruntime

    return Path(onnxruntime.__file__).resolve().parent / "capi"


def load_error(library: str, global_: bool = False) -> str | None:
    """None if ``library`` loads; else the loader's message (e.g. which dependency is missing)."""
    try:
        ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL if global_ else ctypes.DEFAULT_MODE)
    except OSError as exc:
        return str(exc)
    return None


def provider_library_error(name: str) -> str | None:
    """Load onnxruntime's shared provider library (globally, as onnxruntime does), then ``name``'s."""
    capi = _ort_capi_dir()
    lib = capi / f"libonnxruntime_providers_{name}.so"
    if not lib.exists():
        return None   # a build that links the provider in: nothing to load separately
    load_error(str(capi / "libonnxruntime_providers_shared.so"), global_=True)
    return load_error(str(lib))


@functools.lru_cache(maxsize=None)
def preload_gpu_libraries() -> tuple[str, ...]:
    """``onnxruntime.preload_dlls()`` + pip's TensorRT libraries, once per process; what they printed
    (e.g. "Failed to load libcublasLt.so.13: ..."), captured so nothing reaches stdout."""
    import onnxruntime as ort

    printed = io.StringIO()
    notes: list[str] = []
    with contextlib.redirect_stdout(printed):
        preload = getattr(ort, "preload_dlls", None)
        if preload is None:
            notes.append(f"onnxruntime {ort.__version__} has no preload_dlls(); CUDA libraries must be on "
                         "the loader path")
        else:
            try:
                preload()
            except Exception as exc:  # noqa: BLE001  (a preload failure is a fact, not a crash)
                notes.append(f"onnxruntime.preload_dlls() failed: {exc}")
    notes += [line.strip() for line in printed.getvalue().splitlines()
              if line.strip() and not line.startswith("Please follow")]
    notes += _preload_tensorrt_libs()
    return tuple(notes)


def _preload_tensorrt_libs() -> list[str]:
    """pip's ``tensorrt`` wheels keep libnvinfer in ``site-packages/tensorrt_libs``; load it globally so
    onnxruntime's TensorRT provider finds it (a no-op where TensorRT comes from the system)."""
    import glob

    spec = importlib.util.find_spec("tensorrt_libs")
    if spec is None or not spec.submodule_search_locations:
        return []
    notes = []
    folder = Path(list(spec.submodule_search_locations)[0])
    for pattern in ("libnvinfer.so.*", "libnvinfer_plugin.so.*", "libnvonnxparser.so.*"):
        for path in sorted(glob.glob(str(folder / pattern)))[:1]:
            error = load_error(path, global_=True)
            if error:
                notes.append(f"Failed to load {path}: {error}")
    return notes


def required_cuda_major() -> int | None:
    """The CUDA major version this onnxruntime-gpu build was made for (``onnxruntime.cuda_version``)."""
    import onnxruntime as ort

    text = str(getattr(ort, "cuda_version", "") or "")
    try:
        return int(text.split(".")[0])
    except ValueError:
        return None


def assess(name: str, *, in_build: bool, ort_version: str, driver: CudaDriver, library_error: str | None,
           need_cuda_major: int | None, preload_notes: tuple[str, ...] = ()) -> ProviderStatus:
    """The verdict for GPU provider ``name`` from the probed facts (see the module docstring)."""
    if not in_build:
        return not_in_build(name, ort_version)
    reasons = []
    if driver.load_error is not None:
        reasons.append(f"no NVIDIA GPU driver ({driver.load_error})")
    else:
        if need_cuda_major is not None and driver.version is not None and driver.version // 1000 < need_cuda_major:
            reasons.append(f"the NVIDIA driver supports CUDA {driver.cuda}, onnxruntime {ort_version} needs "
                           f"CUDA {need_cuda_major} (update the driver)")
        if driver.init_error is not None:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            reasons.append(f"the GPU cannot be used ({driver.init_error}"
                           + (f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "") + ")")
        elif driver.devices == 0:
            reasons.append("no visible GPU (the driver reports 0 devices)")
    if library_error is not None:
        need = {"cuda": "CUDA and cuDNN", "tensorrt": "TensorRT, CUDA and cuDNN"}[name]
        what = (f"needs {library_error.split(':', 1)[0].strip()}, which is not installed ({need} libraries "
                "are missing)" if "cannot open shared object file" in library_error
                else f"cannot be loaded ({library_error})")
        reasons.append(f"onnxruntime's {name} provider library {what}")
        missing = [n for n in preload_notes if "Failed to load" in n]
        if missing and "cannot open shared object file" in library_error:
            reasons.append("preload_dlls: " + "; ".join(m.split(":", 1)[0].replace("Failed to load ", "")
                                                       + " not found" for m in missing))
    if reasons:
        return ProviderStatus(name, False, "; ".join(reasons))
    return ProviderStatus(name, True)


@functools.lru_cache(maxsize=None)
def probe_gpu_provider(name: str) -> ProviderStatus:
    """``assess`` on this machine's facts; cached per process."""
    import onnxruntime as ort

    in_build = ORT_PROVIDER_NAMES[name] in ort.get_available_providers()
    notes = preload_gpu_libraries() if in_build else ()
    driver = read_cuda_driver() if in_build else CudaDriver()
    library = provider_library_error(name) if in_build else None
    return assess(name, in_build=in_build, ort_version=ort.__version__, driver=driver, library_error=library,
                  need_cuda_major=required_cuda_major(), preload_notes=notes)


def _library_version(library: str, symbol: str) -> int | None:
    try:
        fn = getattr(ctypes.CDLL(library), symbol)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_size_t if symbol == "cudnnGetVersion" else ctypes.c_int
    return int(fn())


def _tensorrt_version() -> str | None:
    for lib in ("libnvinfer.so.10", "libnvinfer.so.11", "libnvinfer.so.8", "libnvinfer.so"):
        value = _library_version(lib, "getInferLibVersion")
        if value:
            return f"{value // 10000}.{value // 100 % 100}.{value % 100}" if value >= 10000 else \
                f"{value // 1000}.{value // 100 % 10}.{value % 100}"
    return None


def gpu_facts() -> dict[str, Any]:
    """GPU names, driver, CUDA (driver and onnxruntime build), cuDNN and TensorRT versions, for reports.
    Every value is ``None`` where it could not be read; ``reason`` says why when there is no GPU."""
    import onnxruntime as ort

    driver = read_cuda_driver()
    cudnn = _library_version("libcudnn.so.9", "cudnnGetVersion")
    facts: dict[str, Any] = {
        "gpus": list(driver.names), "device_count": driver.devices,
        "driver_cuda": driver.cuda, "onnxruntime_cuda_build": getattr(ort, "cuda_version", None) or None,
        "cudnn": f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if cudnn and cudnn >= 10000 else
                 (str(cudnn) if cudnn else None),
        "tensorrt": _tensorrt_version(),
        "driver_error": driver.load_error or driver.init_error,
    }
    return facts
