"""A bundle's device profile: the graph, intra-op threads, spinning and ``batch_tokens`` that ``edgebert tune`` measured
fastest on this machine, among the graphs that passed the bundle's own accuracy gate here (``runtime.tune``).

One file per bundle folder, ``$EDGEBERT_CACHE/profiles/<hash of the folder's path>.json`` (beside the stamps),
holding the bundle's manifest sha256 and this machine's identity (CPU kind and model, the CPUs this process may
use, the onnxruntime version). ``EdgeSession`` applies it to the settings its caller left unset (an argument
always wins) and says so in ``describe()["profile"]``; a profile is ignored, saying why, when it was made for
another export of the bundle (its manifest changed: **stale**) or on another machine or onnxruntime (a shared
home folder: **foreign**). ``EdgeSession(profile=False)`` or ``EDGEBERT_PROFILE=0`` ignores profiles. Torch-free.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgebert.errors import ConfigError
from edgebert.files.atomic import write_json
from edgebert.files.hashing import sha256_file
from edgebert.files.jsonfile import read_json_object
from edgebert.files.user_cache import cache_root

__all__ = ["DeviceProfile", "SETTINGS", "ENV", "machine_identity", "manifest_sha256", "profile_path",
           "save_profile", "load_profile", "AppliedProfile"]

PROFILE_DIR = "profiles"
ENV = "EDGEBERT_PROFILE"
SETTINGS = ("precision", "int8_target", "threads", "allow_spinning", "pin_threads", "batch_tokens")   # what a profile may set
VERSION = 1


@dataclass
class DeviceProfile:
    bundle: str                       # the folder it was tuned for (resolved)
    bundle_sha256: str                # its manifest.json's sha256
    machine: dict[str, Any]           # machine_identity() where it was tuned
    settings: dict[str, Any]          # SETTINGS -> value (None: EdgeSession's default)
    measured: dict[str, Any] = field(default_factory=dict)   # the tune run's figures (default vs chosen ...)
    made: str = ""
    version: int = VERSION

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AppliedProfile:
    """What a session did with the profile of its bundle: ``describe()["profile"]``."""

    file: str
    status: str                       # applied | none | stale | foreign | off | unreadable
    note: str
    applied: dict[str, Any] = field(default_factory=dict)      # setting -> value taken from the profile
    overridden: list[str] = field(default_factory=list)       # settings the caller set itself

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def machine_identity(host) -> dict[str, Any]:
    """What makes timings transferable: the CPU's kind (INT8 kernel family) and model, the CPUs this process may
    use, the onnxruntime version."""
    import onnxruntime as ort

    from edgebert.system.environment import cpu_model, usable_cpus

    return {"cpu_kind": host.kind, "cpu_model": cpu_model(), "cpus": usable_cpus(), "onnxruntime": ort.__version__}


def manifest_sha256(bundle_dir: str | os.PathLike) -> str:
    return sha256_file(Path(bundle_dir) / "manifest.json")


def profile_path(bundle_dir: str | os.PathLike) -> Path:
    name = hashlib.sha256(str(Path(bundle_dir).resolve()).encode("utf-8")).hexdigest()[:24]
    return cache_root() / PROFILE_DIR / f"{name}.json"


def save_profile(bundle_dir: str | os.PathLike, profile: DeviceProfile) -> Path:
    path = profile_path(bundle_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, profile.as_dict())
    return path


def profiles_enabled() -> bool:
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{ENV}={os.environ[ENV]!r} is neither on nor off", "set it to 0 to ignore device profiles")


def _differs(made: dict[str, Any], here: dict[str, Any]) -> list[str]:
    return [f"{k} {made.get(k)!r} (here {here.get(k)!r})" for k in ("cpu_kind", "cpu_model", "cpus", "onnxruntime")
            if made.get(k) != here.get(k)]


def load_profile(bundle_dir: str | os.PathLike, host, wanted: bool = True) -> tuple[DeviceProfile | None, AppliedProfile]:
    """The profile of ``bundle_dir`` for this machine, or None with the reason (``AppliedProfile.status``)."""
    path = profile_path(bundle_dir)
    if not wanted or not profiles_enabled():
        why = "profile=False" if not wanted else f"{ENV}=0"
        return None, AppliedProfile(str(path), "off", f"device profiles off ({why})")
    if not path.is_file():
        return None, AppliedProfile(str(path), "none", "no device profile: `edgebert tune BUNDLE` measures one")
    try:
        value = read_json_object(path, "device profile")
        profile = DeviceProfile(**{k: value[k] for k in ("bundle", "bundle_sha256", "machine", "settings")},
                                measured=value.get("measured") or {}, made=value.get("made", ""),
                                version=int(value.get("version", 0)))
        if profile.version != VERSION or not isinstance(profile.settings, dict):
            raise ValueError(f"version {profile.version}")
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        return None, AppliedProfile(str(path), "unreadable", f"device profile ignored: unreadable ({exc}); "
                                                             "run `edgebert tune BUNDLE` again")
    now = manifest_sha256(bundle_dir)
    if profile.bundle_sha256 != now:
        return None, AppliedProfile(str(path), "stale", f"device profile ignored: stale, tuned for another export of "
                                                        f"this bundle (manifest sha256 {profile.bundle_sha256[:12]}, "
                                                        f"now {now[:12]}); run `edgebert tune BUNDLE` again")
    differs = _differs(profile.machine, machine_identity(host))
    if differs:
        return None, AppliedProfile(str(path), "foreign", "device profile ignored: tuned on another machine ("
                                    + "; ".join(differs) + "); run `edgebert tune BUNDLE` here")
    return profile, AppliedProfile(str(path), "applied", f"device profile of {profile.made or 'an earlier run'} "
                                                         f"on this {host.kind} CPU")
