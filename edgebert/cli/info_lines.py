"""What ``edgebert info`` says beyond versions: the threads a session may use, which onnxruntime providers
can actually run here (and why the others cannot: ``runtime.gpu_probe``'s reasons, since onnxruntime-gpu
lists CUDA and TensorRT on any Linux x86-64 machine, GPU or not), and with a BUNDLE argument what that
bundle holds and how it runs here (default precision, pooling). Torch-free; reads, never hashes."""

from __future__ import annotations

from pathlib import Path


def runtime_lines() -> list[str]:
    """``threads: ...`` and one ``provider <name>: ...`` line per provider, usable ones first."""
    from edgebert.runtime.providers import AUTO_ORDER, probe
    from edgebert.system.environment import usable_cpus

    cpus = usable_cpus()
    lines = [f"threads: {cpus} CPU(s) usable by this process: --threads / EdgeSession(threads=) take 1..{cpus}; "
             "unset, onnxruntime uses one per physical core"]
    statuses = [probe(name) for name in reversed(AUTO_ORDER)]            # cpu, cuda, tensorrt
    usable = [s.name for s in statuses if s.available]
    lines.append(f"providers usable here: {', '.join(usable)} (provider='auto' tries "
                 f"{' -> '.join(n for n in AUTO_ORDER if n in usable)})")
    lines += [f"provider {s.name}: not usable here: {s.reason}" for s in statuses if not s.available]
    from edgebert.runtime.openvino_graph import INSTALL_HINT, openvino_version

    version = openvino_version()
    lines.append(f"openvino: {version}: runs the graphs of `export --target openvino`" if version else
                 f"openvino: not installed ({INSTALL_HINT} runs `--target openvino` graphs)")
    return lines


def bundle_lines(path: Path) -> list[str]:
    """A bundle (folder or archive): task, sizes, graphs, the precision a default session loads here and
    why, the pooling ``embed`` / ``encode`` use, labels."""
    from edgebert.bundle import read_manifest
    from edgebert.bundle.bundle_pooling import bundle_pooling
    from edgebert.bundle.task_registry import bundle_task
    from edgebert.runtime.archive import bundle_folder
    from edgebert.runtime.hostcpu import detect_host
    from edgebert.runtime.precision import choose_precision
    from edgebert.runtime.vector_pooling import choose_pooling

    folder = bundle_folder(path)
    manifest = read_manifest(folder)
    cfg = manifest.config
    where = f"{path}" + (f" (archive, extracted to {folder})" if folder != path else "")
    lines = [f"bundle: {where}",
             f"  task: {manifest.task}; {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, vocabulary "
             f"{cfg.vocab_size}, up to {manifest.max_length} tokens"]
    graphs = [f"{key} ({entry.file}" + (f", target {entry.target}" if entry.target else "") + ")"
              for key, entry in manifest.models.items()]
    lines.append(f"  graphs: {', '.join(graphs)}")
    packed = manifest.get_extra("packed")
    if isinstance(packed, dict):
        lines.append(f"  one-device bundle for {packed.get('target')}: left out "
                     + ", ".join(f"{e.get('file')} ({e.get('model')})" for e in packed.get("left_out", [])))
    host_cpu = detect_host()
    from edgebert.runtime.device_profile import load_profile

    profile, said = load_profile(folder, host_cpu)
    chosen = choose_precision(profile.settings.get("precision") if profile else None, manifest, host_cpu,
                              profile.settings.get("int8_target") if profile else None)
    why = "this machine's device profile, `edgebert tune`" if profile and profile.settings.get("precision") else \
        chosen.reason
    lines.append(f"  default precision here: {chosen.precision} ({why})")
    lines.append(f"  device profile: {said.note}" + (": " + ", ".join(f"{k}={v}" for k, v in profile.settings.items()
                                                                      if v is not None) if profile else ""))
    if any(e.engine == "openvino" for e in manifest.models.values()):
        from edgebert.runtime.int8_choice import choose_openvino

        engine, why_not = choose_openvino(manifest, host_cpu)
        lines.append(f"  int8 engine here: {'openvino (' + engine.reason + ')' if engine else 'onnxruntime: ' + why_not}")
    if bundle_task(manifest.task).has_pooling:
        pooling = choose_pooling(None, bundle_pooling(folder, manifest, verify=False))
        lines.append(f"  pooling: {pooling.describe()}; EdgeSession.embed and encode use it unless told otherwise")
    if manifest.label_names:
        lines.append(f"  labels: {', '.join(manifest.label_names)}")
    host = manifest.get_extra("export_host") or {}
    if host.get("cpu"):
        lines.append(f"  exported on: {host['cpu']} ({host.get('kind', '?')})")
    return lines
