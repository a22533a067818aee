"""``edgebert.bundle.manifest.Manifest``: the typed manifest.json of a real exported bundle, its JSON
kept byte for byte, version 1 bundles still read (``LEGACY_INT8``), unknown versions refused."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from edgebert.bundle import LEGACY_INT8, Manifest, ModelEntry, read_manifest
from edgebert.errors import BundleError
from runtime_fixtures import tiny_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return tiny_bundle(tmp_path_factory.getbasetemp())[1]


@pytest.fixture
def raw(bundle) -> dict:
    return json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))


def _version_1(manifest: dict) -> dict:
    """``manifest`` as a version-1 exporter wrote it: no precision / target / requires per entry."""
    old = copy.deepcopy(manifest)
    old["version"] = 1
    old["models"] = {k: {kk: vv for kk, vv in e.items() if kk not in ("precision", "target", "requires")}
                     for k, e in old["models"].items()}
    return old


def test_to_dict_gives_back_the_exported_file_byte_for_byte(bundle):
    text = (bundle / "manifest.json").read_text(encoding="utf-8")
    manifest = Manifest.read(bundle)
    assert json.dumps(manifest.to_dict(), indent=2) + "\n" == text
    assert manifest.to_json() == text
    assert Manifest.from_dict(manifest.to_dict()).to_json() == text          # and again through from_dict
    assert manifest.with_files(dict(manifest.files)).to_json() == text


def test_typed_fields_match_the_json(bundle, raw):
    m = read_manifest(bundle)
    assert (m.version, m.task) == (2, "embed") == (raw["version"], raw["task"])
    cfg = raw["config"]
    assert (m.config.hidden_size, m.config.num_hidden_layers, m.config.num_attention_heads, m.config.vocab_size,
            m.config.max_position_embeddings, m.config.intermediate_size, m.config.type_vocab_size) == \
        (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["vocab_size"],
         cfg["max_position_embeddings"], cfg["intermediate_size"], cfg["type_vocab_size"]) == (64, 2, 4, 289, 128, 128, 2)
    tok = raw["tokenizer"]
    assert (m.tokenizer.file, m.tokenizer.pad_id, m.tokenizer.cls_id, m.tokenizer.sep_id, m.tokenizer.mask_id,
            m.tokenizer.unk_id) == (tok["file"], tok["pad_id"], tok["cls_id"], tok["sep_id"], tok["mask_id"],
                                    tok["unk_id"]) == ("tokenizer.json", 0, 2, 3, 4, 1)
    assert m.max_length == min(raw["max_sequence_length"], cfg["max_position_embeddings"]) == 128
    assert m.input_names == [i["name"] for i in raw["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert m.output_names == [o["name"] for o in raw["outputs"]] == ["last_hidden_state", "pooler_output"]
    assert [o.shape for o in m.outputs] == [tuple(o["shape"]) for o in raw["outputs"]]
    assert m.label_names == [] and m.labels is None
    assert set(m.models) == set(raw["models"]) == {"fp32", "int8"}
    for key, entry in m.models.items():
        assert isinstance(entry, ModelEntry) and entry.key == key
        assert (entry.file, entry.precision, entry.graph) == (raw["models"][key]["file"], raw["models"][key]["precision"],
                                                             raw["models"][key].get("graph"))
    int8 = m.models["int8"]
    assert (int8.target, int8.requires) == (raw["models"]["int8"]["target"], raw["models"]["int8"]["requires"])
    assert int8.is_cpu_int8 and not m.models["fp32"].is_cpu_int8 and list(m.int8_graphs()) == ["int8"]
    assert int8.needs_exact_u8s8 is raw["models"]["int8"]["requires"]["u8s8_exact"]
    assert int8.get_extra("accuracy") == raw["models"]["int8"]["accuracy"]
    assert m.get_extra("versions") == raw["versions"] and dict(m.files) == raw["files"]


def test_a_version_1_manifest_opens_with_the_legacy_int8_target(bundle, raw, tmp_path):
    old = _version_1(raw)
    m = Manifest.from_dict(old)
    int8 = m.models["int8"]
    assert (m.version, int8.precision, int8.target) == (1, "int8", "legacy-8bit")
    assert int8.requires == LEGACY_INT8["requires"] and int8.needs_exact_u8s8
    assert m.models["fp32"].precision == "fp32" and m.models["fp32"].target is None
    # and a version-1 bundle on disk runs: its 8-bit INT8 graph is loaded as the runtime would any other
    from edgebert.runtime import EdgeSession

    path = shutil.copytree(bundle, tmp_path / "v1")
    (path / "manifest.json").write_text(json.dumps(old, indent=2) + "\n", encoding="utf-8")
    session = EdgeSession(path, provider="cpu", precision="int8")
    assert session.manifest.version == 1 and isinstance(session.manifest, Manifest)
    assert session.int8_choice.target == "legacy-8bit" and session.embed("a good film").shape == (1, 64)


def test_an_unknown_version_is_refused_with_one_line_saying_to_re_export(raw):
    for version in (3, 0, "2", None):
        with pytest.raises(BundleError) as raised:
            Manifest.from_dict({**raw, "version": version})
        line = raised.value.one_line()
        assert line == (f"manifest.json has bundle version {version!r}; this edgebert reads versions 1, 2 "
                        "(re-export the bundle with this edgebert)")
        assert "\n" not in str(raised.value)


def test_a_version_2_entry_without_precision_is_refused_but_version_1_derives_it(raw):
    entry = {k: v for k, v in raw["models"]["int8"].items() if k != "precision"}
    with pytest.raises(BundleError, match="models.int8 has no precision"):
        Manifest.from_dict({**raw, "models": {**raw["models"], "int8": entry}})
    assert ModelEntry.from_dict("int8", entry, version=1).precision == "int8"
