"""Issue 20, defects 4-7 (runtime half of 7): a bundle whose parts disagree, a malformed bundle, a
symlinked manifest and NaN outputs are typed one-line errors when the bundle opens or runs, never
onnxruntime's or Python's own, and onnxruntime's log stays off stderr. Every bundle here is a copy
of the tiny seeded embed bundle with one part changed (hashes updated, so ``verify=True`` passes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgebert.bundle import model_path
from edgebert.cli import main
from edgebert.errors import BundleError, ConfigError, DataError, RuntimeFault
from edgebert.files.hashing import sha256_file
from edgebert.runtime import EdgeSession
from runtime_fixtures import tiny_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return tiny_bundle(tmp_path_factory.getbasetemp())[1]


def _copy(src: Path, dst: Path, manifest=None, tokenizer=None) -> Path:
    """A copy of ``src`` with ``manifest(dict)`` / ``tokenizer(dict)`` applied to its JSON files; the
    tokenizer's hash is updated so that the files still verify."""
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    if tokenizer is not None:
        t = json.loads((dst / "tokenizer.json").read_text())
        tokenizer(t)
        (dst / "tokenizer.json").write_text(json.dumps(t))
        m["files"]["tokenizer.json"] = sha256_file(dst / "tokenizer.json")
    if manifest is not None:
        manifest(m)
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


def _session(path, **kw) -> EdgeSession:
    return EdgeSession(path, provider="cpu", precision="fp32", **kw)


def _check(path: Path, capsys, *extra: str) -> tuple[int, str]:
    code = main(["check", str(path), "--max-texts", "8", *extra])
    out, err = capsys.readouterr()
    return code, out + err


def _feeds(ids: np.ndarray) -> dict[str, np.ndarray]:
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


# ---------------------------------------------------------------------------- 4: parts that disagree
def _bigger_vocabulary(tok: dict) -> None:
    vocab = tok["model"]["vocab"]
    first = len(vocab)
    vocab.update({f"zzword{i}": first + i for i in range(20)})     # ids 289..308; the graph has 289 rows


def test_a_tokenizer_bigger_than_the_embedding_table_is_refused_on_open(bundle, tmp_path, capfd):
    """Defect 4: it used to open, then fail in onnxruntime (InvalidArgument, and an ERROR line on
    stderr) on the first text holding a new token."""
    path = _copy(bundle, tmp_path / "b", tokenizer=_bigger_vocabulary)
    with pytest.raises(BundleError, match=r"tokenizer.json gives token ids up to 308 \('zzword19'\), but the "
                                          r"model's embedding table holds 289") as raised:
        _session(path).embed("zzword3 film")
    assert str(path) in raised.value.one_line()
    assert "onnxruntime" not in capfd.readouterr().err


def test_a_manifest_claiming_more_positions_than_the_graph_is_refused_on_open(bundle, tmp_path):
    """Defect 4: max_sequence_length 512 on a graph of 128 positions failed at the first long text."""
    def claim(m):
        m["config"]["max_position_embeddings"] = m["max_sequence_length"] = 512
    path = _copy(bundle, tmp_path / "b", manifest=claim)
    for verify in (True, False):
        with pytest.raises(BundleError, match=r"model.onnx \(fp32\) has 128 positions in its embedding table, but "
                                              r"the manifest's max_sequence_length is 512"):
            _session(path, verify=verify)


def test_special_ids_past_the_table_or_missing_from_the_tokenizer_are_refused(bundle, tmp_path):
    """Defect 4: a pad id past the embedding table (it would fail at the first padded batch), and a
    mask id the tokenizer does not have."""
    path = _copy(bundle, tmp_path / "pad", manifest=lambda m: m["tokenizer"].__setitem__("pad_id", 2 ** 31 - 1))
    with pytest.raises(BundleError, match="has 289 token ids in its embedding table, but the manifest's "
                                          "tokenizer.pad_id is 2147483647"):
        _session(path)

    def smaller(tok):
        tok["model"]["vocab"] = {k: v for k, v in tok["model"]["vocab"].items() if v < 280}
    path = _copy(bundle, tmp_path / "mask", manifest=lambda m: m["tokenizer"].__setitem__("mask_id", 285),
                 tokenizer=smaller)
    with pytest.raises(BundleError, match="tokenizer.mask_id is 285, a token id tokenizer.json does not have"):
        _session(path)


def test_onnxruntime_failures_in_run_are_typed_and_its_log_stays_off_stderr(bundle, capfd):
    """Defect 4: whatever onnxruntime still refuses is a RuntimeFault naming the graph, the bundle and
    the inputs; its coloured ERROR line only appears when asked for (ort_log_level)."""
    session = _session(bundle)
    empty = _feeds(np.zeros((1, 0), np.int64))                    # no tokens: the pooler's Gather fails
    with pytest.raises(RuntimeFault, match=rf"onnxruntime failed running graph fp32 \(model.onnx\) of {bundle} on "
                                           r"inputs input_ids 1x0, attention_mask 1x0, token_type_ids 1x0 "
                                           r"\(InvalidArgument: .*Gather") as raised:
        session.run(empty)
    assert "EDGEBERT_ORT_LOG_LEVEL" in raised.value.hint
    assert capfd.readouterr().err == ""
    loud = _session(bundle, ort_log_level=3)
    with pytest.raises(RuntimeFault):
        loud.run(empty)
    assert "[E:onnxruntime" in capfd.readouterr().err


def test_inputs_the_graph_cannot_take_name_the_input(bundle, capfd):
    """Defect 4: ids past the vocabulary, more tokens than positions, ragged inputs, float ids."""
    session = _session(bundle)
    ids = np.array([[2, 300, 3]], np.int64)
    with pytest.raises(DataError, match=r"run\(\): input_ids holds 300, outside 0..288 of"):
        session.run(_feeds(ids))
    with pytest.raises(DataError, match=r"run\(\): token_type_ids holds 2, outside 0..1"):
        session.run({**_feeds(ids[:, :1]), "token_type_ids": np.full((1, 1), 2)})
    with pytest.raises(DataError, match=r"inputs of 129 tokens; .* has 128 positions"):
        session.run(_feeds(np.full((1, 129), 5, np.int64)))
    with pytest.raises(DataError, match=r"attention_mask has shape \(1, 2\); every input must be"):
        session.run({**_feeds(ids), "attention_mask": np.ones((1, 2), np.int64)})
    with pytest.raises(DataError, match="input_ids is float64 data, not integer ids"):
        session.run(_feeds(ids.astype(np.float64)))
    assert capfd.readouterr().err == ""


def test_the_onnxruntime_log_level_is_checked(bundle, monkeypatch):
    with pytest.raises(ConfigError, match="ort_log_level=7 must be an onnxruntime log severity from 0"):
        _session(bundle, ort_log_level=7)
    monkeypatch.setenv("EDGEBERT_ORT_LOG_LEVEL", "loud")
    with pytest.raises(ConfigError, match="EDGEBERT_ORT_LOG_LEVEL='loud' must be"):
        _session(bundle)
    monkeypatch.setenv("EDGEBERT_ORT_LOG_LEVEL", "2")
    assert _session(bundle).ort_log_level == 2


# ---------------------------------------------------------------------------- 5: malformed bundles
def _word_level_without_unk(tok: dict) -> None:
    vocab = {k: v for k, v in tok["model"]["vocab"].items() if k != "[UNK]"}
    tok["model"] = {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}


MALFORMED = {   # case: (manifest edit, tokenizer edit, raw manifest text, error type, message, check's exit code)
    "WordLevel tokenizer without [UNK]": (None, _word_level_without_unk, None, BundleError,
                                          "tokenizer.json cannot encode text (WordLevel error: Missing [UNK] token", 1),
    "100,000 nested brackets": (None, None, "[" * 100_000 + "]" * 100_000, BundleError,
                                "manifest.json is nested too deeply to read", 2),
    "tokenizer file name with a NUL byte": (lambda m: m["tokenizer"].__setitem__("file", "tok\x00.json"), None, None,
                                            BundleError, "names a file outside the bundle: 'tok\\x00.json'", 2),
    "pad_id 10**30": (lambda m: m["tokenizer"].__setitem__("pad_id", 10 ** 30), None, None, BundleError,
                      "tokenizer.pad_id is 1000000000000000000000000000000, not a token id", 2),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_bundles_are_typed_errors_and_check_says_why(case, bundle, tmp_path, capsys):
    """Defect 5: these raised Exception, RecursionError, ValueError and OverflowError (at the first
    embed), and `edgebert check` called them "unexpected ... report it"."""
    manifest, tokenizer, raw, error, message, exit_code = MALFORMED[case]
    path = _copy(bundle, tmp_path / "b", manifest, tokenizer)
    if raw is not None:
        (path / "manifest.json").write_text(raw)
    with pytest.raises(error) as raised:
        _session(path).embed(["a film", "the end of it"])
    assert message in raised.value.one_line()
    code, output = _check(path, capsys)
    assert code == exit_code and "unexpected" not in output and "Traceback" not in output, output
    reason = output.strip().splitlines()[-1]
    assert reason.startswith("FAIL: " if exit_code == 1 else "error: ") and message in reason


def test_a_session_of_no_bundle_is_a_config_error():
    """Defect 5: EdgeSession(None) raised TypeError."""
    for value in (None, 3, ["bundle"]):
        with pytest.raises(ConfigError) as raised:
            EdgeSession(value)
        assert f"bundle_dir={value!r} is a {type(value).__name__}, not a path" in raised.value.one_line()


# ---------------------------------------------------------------------------- 6: a symlinked manifest
def test_a_symlinked_manifest_is_refused_everywhere(bundle, tmp_path, capsys):
    """Defect 6: manifest.json could be a symlink to a file outside the bundle, and was read."""
    path = _copy(bundle, tmp_path / "b")
    outside = tmp_path / "elsewhere.json"
    shutil.move(path / "manifest.json", outside)
    (path / "manifest.json").symlink_to(outside)
    phrase = f"{path}/manifest.json is a symlink (to {outside})"
    with pytest.raises(BundleError) as raised:
        _session(path, verify=False)
    assert phrase in raised.value.one_line()
    for argv in (["check", str(path)], ["bench", str(path), "--preset", "quick"],
                 ["evaluate", str(path), "--task", "mlm", "--data", str(outside)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert phrase in err and "unexpected" not in err, (argv, err)


# ---------------------------------------------------------------------------- 7: NaN is never silent
def _nan_rows_bundle(src: Path, dst: Path, tokens: tuple[str, ...]) -> Path:
    """A copy whose fp32 graph has NaN embedding rows for ``tokens``: texts holding one give NaN."""
    onnx = pytest.importorskip("onnx", reason="the NaN graph is made with onnx (not in the [cpu] install)")
    from onnx import numpy_helper

    path = _copy(src, dst)
    vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
    model = onnx.load(str(model_path(path)))
    table = next(t for t in model.graph.initializer if t.name.endswith("word_embeddings.weight"))
    weights = numpy_helper.to_array(table).copy()
    weights[[vocab[t] for t in tokens]] = np.nan
    table.CopyFrom(numpy_helper.from_array(weights, table.name))
    onnx.save(model, str(model_path(path)))
    m = json.loads((path / "manifest.json").read_text())
    m["files"][m["models"]["fp32"]["file"]] = sha256_file(model_path(path))
    (path / "manifest.json").write_text(json.dumps(m))
    return path


def test_nan_outputs_raise_naming_the_bundle_graph_and_rows(bundle, tmp_path, capsys):
    """Defect 7 (runtime): embed returned all-NaN vectors without a word."""
    path = _nan_rows_bundle(bundle, tmp_path / "b", ("film",))
    session = _session(path)
    assert np.isfinite(session.embed(["the end", "a good day"])).all()     # rows without the token: fine
    with pytest.raises(RuntimeFault, match=rf"{path}: graph fp32 \(model.onnx\) gave NaN or infinite "
                                           r"last_hidden_state for 2 of 3 rows"):
        session.embed(["a film", "the end", "good film"], batch_size=3)
    texts = tmp_path / "texts.txt"
    texts.write_text("a good film\nthe end of the day\n", encoding="utf-8")
    code, output = _check(path, capsys, "--data", str(texts))
    assert code == 1 and "gave NaN or infinite" in output.strip().splitlines()[-1], output


def test_a_session_trusts_the_recorded_highest_id_only_for_the_file_it_was_recorded_for(bundle, tmp_path):
    """The export records the tokenizer's highest id beside the tokenizer's hash, so a session skips
    walking the vocabulary; where that hash is not the file's (a re-hashed tokenizer: the test above),
    the session walks the vocabulary itself."""
    from edgebert.bundle import read_manifest

    manifest = read_manifest(bundle)
    tok = manifest.to_dict()["tokenizer"]
    assert tok["max_id_of"] == manifest.files[tok["file"]] and manifest.tokenizer.max_id == tok["max_id"] == 288

    def claim(m, of=None):      # a recorded id past the table: refused only where the record is trusted
        m["tokenizer"]["max_id"] = 5000
        if of is not None:
            m["tokenizer"]["max_id_of"] = of
    with pytest.raises(BundleError, match=r"gives token ids up to 5000"):
        _session(_copy(bundle, tmp_path / "trusted", manifest=claim)).embed("film")
    stale = _copy(bundle, tmp_path / "stale", manifest=lambda m: claim(m, of="0" * 64))
    assert read_manifest(stale).tokenizer.max_id is None
    assert _session(stale).embed("film").shape[0] == 1
