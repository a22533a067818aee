"""ARM64 host detection from recorded texts: ``/proc/cpuinfo`` of real boards (tests/data/cpuinfo/:
Graviton2 = Neoverse N1 with the dot product, Graviton3 = Neoverse V1 with SVE and i8mm, Raspberry Pi 4
= Cortex-A72 without the dot product, RK3588 = Cortex-A55 + A76 big.LITTLE, and an AVX2 EPYC for
contrast) and macOS ``sysctl`` answers (Apple M1 / M2, and a macOS too old to say), through the same
functions ``detect_host`` uses; then what the runtime chooses and says on each."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebert.runtime.hostcpu import HostCpu, host_from, isa_flags
from edgebert.runtime.int8_choice import choose_int8
from edgebert.system.environment import cpu_flags, cpu_model, cpuinfo, cpuinfo_blocks

CPUINFO = Path(__file__).parent / "data" / "cpuinfo"

# fixture -> (flags, CPU name, kernel family, words the host line must hold)
LINUX_ARM = {
    "graviton2_neoverse_n1.txt": ({"dotprod": True, "i8mm": False, "sve": False}, "Arm Neoverse N1", "dotprod",
                                  "arm64 (Arm Neoverse N1; dotprod); onnxruntime U8S8 kernel: exact (dot-product kernel)"),
    "graviton3_neoverse_v1.txt": ({"dotprod": True, "i8mm": True, "sve": True}, "Arm Neoverse V1", "i8mm",
                                  "arm64 (Arm Neoverse V1; dotprod i8mm sve); onnxruntime U8S8 kernel: exact "
                                  "(i8mm matrix-multiply kernel)"),
    "raspberry_pi4_cortex_a72.txt": ({"dotprod": False, "i8mm": False, "sve": False},
                                     "Arm Cortex-A72 (Raspberry Pi 4 Model B Rev 1.4)", "neon",
                                     "arm64 (Arm Cortex-A72 (Raspberry Pi 4 Model B Rev 1.4); no dot product); "
                                     "onnxruntime U8S8 kernel: exact (plain NEON kernel, without the dot "
                                     "product's speed-up)"),
    "rk3588_cortex_a55_a76.txt": ({"dotprod": True, "i8mm": False, "sve": False}, "Arm Cortex-A55 + Cortex-A76",
                                  "dotprod", "arm64 (Arm Cortex-A55 + Cortex-A76; dotprod); onnxruntime U8S8 "
                                             "kernel: exact (dot-product kernel)"),
}


def linux_host(name: str, u8s8: str = "exact") -> HostCpu:
    """The HostCpu that ``detect_host`` builds on the machine the fixture was recorded on."""
    path = CPUINFO / name
    arch = "x86_64" if "epyc" in name else "arm64"
    isa = isa_flags(arch, system="Linux", fields=cpuinfo(path))
    fix = True if u8s8 == "saturating" else None
    return host_from(arch, isa, u8s8, fix, cpu_model(cpuinfo_blocks(path), system="Linux"), system="Linux")


@pytest.mark.parametrize("name", sorted(LINUX_ARM))
def test_linux_arm64_flags_name_and_kernel_from_recorded_cpuinfo(name):
    flags, cpu, kernel, line = LINUX_ARM[name]
    host = linux_host(name)
    assert host.isa == flags and host.model == cpu and host.kind == "arm64" and host.int8_kernel == kernel
    assert host.summary() == line
    assert host.as_dict()["int8_kernel"] == kernel and host.as_dict()["saturates"] is False
    assert "asimd" in cpu_flags(cpuinfo(CPUINFO / name))                     # `edgebert info` lists ARM features


def test_the_pi4_without_the_dot_product_is_named_as_such_everywhere():
    pi = linux_host("raspberry_pi4_cortex_a72.txt")
    assert pi.flags() == [] and pi.cpu_text() == "arm64 CPU (Arm Cortex-A72 (Raspberry Pi 4 Model B Rev 1.4); no dot product)"
    assert cpu_flags(cpuinfo(CPUINFO / "raspberry_pi4_cortex_a72.txt")) == ["asimd"]
    blocks = cpuinfo_blocks(CPUINFO / "raspberry_pi4_cortex_a72.txt")
    assert len(blocks) == 5 and blocks[-1]["Hardware"] == "BCM2835"        # 4 cores + the board block


def test_x86_fixture_reads_as_before():
    host = linux_host("epyc_zen1_avx2.txt", "saturating")
    assert host.kind == "x86-avx2" and host.flags() == ["avx2"] and host.int8_kernel is None
    assert host.model == "AMD EPYC 7551P 32-Core Processor"
    assert host.summary() == ("x86_64 x86-avx2 (avx2); onnxruntime U8S8 kernel: saturating, exact with "
                              "session.x64quantprecision=1")


# macOS: sysctl names -> values as `sysctl -n` prints them; a name missing from the dict does not exist
APPLE_M1 = {"machdep.cpu.brand_string": "Apple M1", "hw.optional.arm.FEAT_DotProd": "1",
            "hw.optional.arm.FEAT_I8MM": "0"}
APPLE_M2 = {"machdep.cpu.brand_string": "Apple M2 Pro", "hw.optional.arm.FEAT_DotProd": "1",
            "hw.optional.arm.FEAT_I8MM": "1"}
OLD_MACOS = {"machdep.cpu.brand_string": "Apple M1"}      # macOS 11: no hw.optional.arm.FEAT_* names


@pytest.mark.parametrize("answers, flags, kernel", [
    (APPLE_M1, {"dotprod": True, "i8mm": False, "sve": False}, "dotprod"),
    (APPLE_M2, {"dotprod": True, "i8mm": True, "sve": False}, "i8mm"),
    (OLD_MACOS, {"dotprod": None, "i8mm": None, "sve": None}, "unknown"),
])
def test_macos_apple_silicon_from_a_faked_sysctl(answers, flags, kernel):
    isa = isa_flags("arm64", system="Darwin", query=answers.get)
    model = cpu_model([], system="Darwin", query=answers.get)
    host = host_from("arm64", isa, "exact", None, model, system="Darwin")
    assert isa == flags and host.int8_kernel == kernel and host.model == answers["machdep.cpu.brand_string"]
    assert host.summary().startswith(f"arm64 ({answers['machdep.cpu.brand_string']}")
    if kernel == "unknown":
        assert host.summary().endswith("exact (kernel family not reported by the OS)")


def test_an_arm64_probe_that_saturates_stays_arm64_and_unsafe():
    host = linux_host("graviton2_neoverse_n1.txt", "saturating")
    assert host.kind == "arm64" and host.saturates                # not relabelled as an x86 CPU
    assert "NOT exact" in host.summary() and "treated as unsafe" in host.summary()


# --------------------------------------------------------------------------- the choice on each host
@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict:
    """The manifest of a tiny bundle exported with ``--target portable,arm64`` (made with torch: skipped in
    a torch-free install)."""
    pytest.importorskip("torch", reason="the fleet's bundle is exported with torch (not installed here)")
    from edgebert.exporters import ExportConfig, export_bundle
    from runtime_fixtures import make_tiny_model_dir

    root = tmp_path_factory.mktemp("arm64_fleet")
    result = export_bundle(ExportConfig(model_dir=make_tiny_model_dir(root / "model", seed=23), out_dir=root / "b",
                                        int8=True, int8_targets=("portable", "arm64"), max_accuracy_loss=0.5,
                                        validation_batch_sizes=(1,), validation_seq_lens=(7,)))
    return result.manifest.to_dict()


@pytest.mark.parametrize("name", sorted(LINUX_ARM))
def test_every_arm64_host_runs_the_arm64_graph_and_says_why(fleet, name):
    host = linux_host(name)
    choice = choose_int8(fleet, host)
    assert (choice.key, choice.target, choice.session_config) == ("int8-arm64", "arm64", {})
    assert choice.reason == (f"this {host.cpu_text()} computes U8S8 products exactly; arm64 graph chosen "
                             "(made for this CPU: 8-bit weights, exact int32 sums here)")
    assert LINUX_ARM[name][1] in choice.reason


def test_x86_hosts_choose_by_their_kernels(fleet):
    avx2 = choose_int8(fleet, linux_host("epyc_zen1_avx2.txt", "saturating"))
    assert avx2.target == "portable" and "cannot saturate" in avx2.reason
    vnni = host_from("x86_64", {"avx2": True, "avx512f": True, "avx512_vnni": True}, "exact", None, "Xeon")
    on_vnni = choose_int8(fleet, vnni)
    assert on_vnni.target == "arm64" and on_vnni.session_config == {}
    assert "8-bit weights: the most accurate graph, and exact here" in on_vnni.reason
    portable_only = {**fleet, "models": {k: v for k, v in fleet["models"].items() if k != "int8-arm64"}}
    alone = choose_int8(portable_only, linux_host("graviton3_neoverse_v1.txt"))
    assert alone.target == "portable" and alone.reason.endswith(
        "(the bundle's only INT8 graph; export --target arm64 for this CPU's 8-bit graph)")
