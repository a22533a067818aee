"""Every setting that shapes only the INT8 graphs is refused without ``--int8`` (one line naming it, nothing
written), never silently unused: ``--gate-data`` as ``--calib`` always was."""

from __future__ import annotations

import json

import pytest

from distill_helpers import assert_one_line_error, run_cli
from edgebert.errors import ConfigError
from edgebert.exporters import ExportConfig
from runtime_fixtures import make_tiny_model_dir

OPTIONS = {   # CLI options -> the flag the message names
    "gate_data": (["--gate-data", "{squad}"], "--gate-data"),
    "gate_size": (["--gate-size", "50"], "--gate-size"),
    "calib_size": (["--calib-size", "64"], "--calib-size"),
    "per_tensor": (["--per-tensor"], "--per-channel/--per-tensor"),
    "outlier_ratio": (["--outlier-ratio", "0"], "--outlier-ratio"),
    "activation_scales": (["--activation-scales", "per-call"], "--activation-scales"),
}


@pytest.mark.parametrize("case", sorted(OPTIONS))
def test_int8_only_option_without_int8_is_refused_in_one_line(case, tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "model", "BertModel")
    squad = tmp_path / "dev.json"
    squad.write_text(json.dumps({"version": "1.1", "data": []}))
    argv, flag = OPTIONS[case]
    code, _, err = run_cli(capsys, "export", model, "--out", tmp_path / "bundle",
                           *[a.format(squad=squad) for a in argv])
    assert_one_line_error(code, err, f"{flag} is an INT8 setting, and INT8 settings need --int8",
                          f"(add --int8, or drop {flag})")
    assert not (tmp_path / "bundle").exists()


def test_the_library_config_names_every_int8_setting_given(tmp_path):
    with pytest.raises(ConfigError, match=r"^--calib, --gate-data are INT8 settings, and INT8 settings need --int8$"):
        ExportConfig(model_dir=tmp_path / "m", out_dir=tmp_path / "o", calib=tmp_path / "c.txt",
                     gate_data=tmp_path / "dev.json")
    with pytest.raises(ConfigError, match="^int8_embedding_tables is an INT8 setting"):
        ExportConfig(model_dir=tmp_path / "m", out_dir=tmp_path / "o", int8_embedding_tables=False)
    # with --int8 they are taken; the defaults without it are no settings at all
    assert ExportConfig(model_dir=tmp_path / "m", out_dir=tmp_path / "o", int8=True, gate_size=50).gate_size == 50
    assert not ExportConfig(model_dir=tmp_path / "m", out_dir=tmp_path / "o").int8


@pytest.mark.parametrize("argv, flag", [(["--int4-block", "64"], "--int4-block"),
                                        (["--int4-attention", "packed"], "--int4-attention"),
                                        (["--int4-accuracy-level", "1"], "--int4-accuracy-level"),
                                        (["--int4-max-accuracy-loss", "0.005"], "--int4-max-accuracy-loss"),
                                        (["--no-int4-rotate"], "--[no-]int4-rotate")])
def test_a_4bit_option_without_int4_is_refused_in_one_line(argv, flag, tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "model", "BertModel")
    code, _, err = run_cli(capsys, "export", model, "--out", tmp_path / "bundle", "--int8", *argv)
    assert_one_line_error(code, err, f"{flag} is a 4-bit setting, and 4-bit settings need --int4",
                          f"(add --int4, or drop {flag})")
    assert not (tmp_path / "bundle").exists()


def test_the_small_graph_takes_its_own_budget_else_the_int8_one(tmp_path):
    base = dict(model_dir=tmp_path / "m", out_dir=tmp_path / "o", int8=True, int4=True, max_accuracy_loss=0.0006)
    assert ExportConfig(**base).int4_config().max_accuracy_loss is None          # None: the INT8 budget
    assert ExportConfig(**base, int4_max_accuracy_loss=0.004).int4_config().max_accuracy_loss == 0.004
    with pytest.raises(ConfigError, match=r"4-bit max_accuracy_loss 1.5 is outside \[0, 1\)"):
        ExportConfig(**base, int4_max_accuracy_loss=1.5)
    assert ExportConfig(**base, int4_accuracy_level=1).int4_config().accuracy_level == 1
    with pytest.raises(ConfigError, match="unknown MatMulNBits accuracy_level 5"):
        ExportConfig(**base, int4_accuracy_level=5)


def test_the_small_graph_rotates_its_inputs_unless_the_student_trained_on_the_unrotated_rounding(tmp_path):
    """Rotation is on by default, but a ``distill --int4-aware`` student learned the unrotated weights' rounding:
    rotating would round other values than it trained on, so its export leaves it off unless asked."""
    import json

    base = dict(out_dir=tmp_path / "o", int8=True, int4=True)
    (tmp_path / "plain").mkdir()
    assert ExportConfig(model_dir=tmp_path / "plain", **base).int4_config().rotate is True
    assert ExportConfig(model_dir=tmp_path / "plain", int4_rotate=False, **base).int4_config().rotate is False
    (tmp_path / "aware").mkdir()
    (tmp_path / "aware" / "distill_config.json").write_text(json.dumps({"int4_block": 128}), encoding="utf-8")
    aware = ExportConfig(model_dir=tmp_path / "aware", **base).int4_config()
    assert aware.rotate is False and aware.block_size == 128
    assert ExportConfig(model_dir=tmp_path / "aware", int4_rotate=True, **base).int4_config().rotate is True
