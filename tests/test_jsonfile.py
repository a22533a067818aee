"""The one JSON reader (``edgebert.files.jsonfile``) and every reader of a user's JSON file behind it: JSON
nested too deeply for Python's parser (its ``RecursionError``) and a lone surrogate (``"\\ud800"``, which
the tokenizer refuses with a raw ``TypeError``) are a one-line error naming the file (and, for a
surrogate, the place in it), never "unexpected RecursionError / TypeError" (issue 49)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgebert.errors import BundleError, CheckpointError, ConfigError, DataError, EdgebertError
from edgebert.files.jsonfile import JsonError, loads, read_json, read_json_object, read_json_or_none
from squad_helpers import toy_squad

DEEP = "[" * 100_000 + "]" * 100_000
LONE = "the film was good \ud800 and long"          # a lone (high) surrogate, as "\\ud800" in JSON text


def _squad_with_lone_surrogate() -> str:
    data = toy_squad(4, seed=0)
    data["data"][0]["paragraphs"][1]["context"] += " \ud800"
    text = json.dumps(data)                    # ensure_ascii: the surrogate is written as the escape \ud800
    assert "\\ud800" in text
    return text


# --------------------------------------------------------------------------- the parser
@pytest.mark.parametrize("text, reason", [
    (DEEP, "is nested too deeply to read"),
    ('{"a": ' * 3000 + "1" + "}" * 3000, "is nested too deeply to read"),
    ("[1, 2,", "is not valid JSON (line 1, column 7: Expecting value)"),
    (b'{"a": "\xff"}', "is not UTF-8 (byte 0xff at line 1, column 8)"),
    ("1" * 5000, "is not valid JSON (Exceeds the limit (4300 digits) for integer string conversion"),
    (json.dumps({"x": [1, {"y": LONE}]}), "has a lone surrogate at x[1].y (character 18: \\ud800)"),
    (json.dumps({"k\udc80": 1}), "has a lone surrogate at a key of the top-level object (character 1: \\udc80)"),
])
def test_every_way_json_fails_is_one_json_error(text, reason):
    with pytest.raises(JsonError) as raised:
        loads(text)
    assert isinstance(raised.value, ValueError) and raised.value.reason.startswith(reason)
    assert "\n" not in raised.value.reason and "set_int_max_str_digits" not in raised.value.reason
    raised.value.reason.encode("utf-8")         # printable: the surrogate is named, not repeated


def test_surrogate_pairs_and_plain_text_are_read():
    assert loads('["\\ud83d\\ude00", "cr\\u00e8me", "\u00e9"]') == ["\U0001F600", "crème", "é"]
    assert loads(b'\xef\xbb\xbf{"a": 1}') == loads('\ufeff{"a": 1}') == {"a": 1}


def test_the_file_readers_name_the_file_and_say_what_to_do(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(DEEP)
    with pytest.raises(DataError) as raised:
        read_json(path, "a SQuAD file", "pass a SQuAD file")
    assert raised.value.one_line() == (f"{path} (a SQuAD file) is nested too deeply to read (arrays or objects "
                                       "inside each other over about 1000 levels) (pass a SQuAD file)")
    with pytest.raises(ConfigError, match="x.json is nested too deeply"):
        read_json_object(path)
    path.write_text(json.dumps([1]))
    with pytest.raises(CheckpointError, match="x.json must hold a JSON object"):
        read_json_object(path, error=CheckpointError)
    with pytest.raises(DataError, match="nowhere.json not found"):
        read_json(tmp_path / "nowhere.json")
    assert read_json_or_none(path) == [1]
    for bad in (DEEP, json.dumps([LONE]), "{"):
        path.write_text(bad)
        assert read_json_or_none(path) is None
    assert read_json_or_none(tmp_path) is None and read_json_or_none(tmp_path / "nowhere.json") is None


# --------------------------------------------------------------------------- every reader of a user's file
def _squad(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "user.json"
    path.write_text(text, encoding="utf-8")
    return path


def _gate_data(tmp_path, path):                 # export --gate-data
    from edgebert.quantization.feeds import question_split

    question_split(None, 10, 200, gate_data=path)


def _gate_data_up_front(tmp_path, path):        # export --gate-data, refused before the export runs
    from edgebert.quantization.config import Int8Config

    Int8Config(gate_data=path)


def _evaluate(tmp_path, path):                  # evaluate --task squad --data
    from edgebert.stages.evaluate import evaluate

    (tmp_path / "model").mkdir(exist_ok=True)
    evaluate(tmp_path / "model", "squad", path)


def _check_data(tmp_path, path):                # check --data on a qa bundle
    from edgebert.runtime.held_out import measured_texts

    measured_texts(path, 10, "qa")


def _read_squad(tmp_path, path):
    from edgebert.qa.squad_file import read_squad

    read_squad(path)


SQUAD_READERS = {"export --gate-data": _gate_data, "Int8Config(gate_data)": _gate_data_up_front,
                 "evaluate --data": _evaluate, "check --data": _check_data,
                 "read_squad": _read_squad}


@pytest.mark.parametrize("reader", list(SQUAD_READERS))
def test_squad_files_nested_too_deeply_are_one_line_naming_the_file(tmp_path, reader):
    path = _squad(tmp_path, DEEP)
    with pytest.raises(DataError) as raised:
        SQUAD_READERS[reader](tmp_path, path)
    assert raised.value.one_line().startswith(f"{path} is nested too deeply to read")


@pytest.mark.parametrize("reader", list(SQUAD_READERS))
def test_a_lone_surrogate_in_a_squad_file_is_refused_naming_the_file_and_the_record(tmp_path, reader):
    """The tokenizer cannot take it (``TypeError: TextInputSequence must be str``): the file is refused
    where it is read, naming the paragraph, as ``EdgeSession`` refuses such a text (``check_text``)."""
    path = _squad(tmp_path, _squad_with_lone_surrogate())
    with pytest.raises(DataError) as raised:
        SQUAD_READERS[reader](tmp_path, path)
    line = raised.value.one_line()
    assert line.startswith(f"{path} has a lone surrogate at data[0].paragraphs[1].context (character ")
    assert "\\ud800): half a UTF-16 pair, not a character (write the character itself" in line
    line.encode("utf-8")


def test_the_tokenizer_refuses_a_lone_surrogate_which_is_why_the_reader_does():
    from distill_helpers import toy_tokenizer

    with pytest.raises(TypeError):
        toy_tokenizer().encode("what was it like ?", LONE)


def _model_config(tmp_path, path):
    from edgebert.model.config import BertConfig

    BertConfig.load(path)


def _modules_json(tmp_path, path):
    from edgebert.bundle.pooling import read_pooling

    path.rename(tmp_path / "modules.json")
    read_pooling(tmp_path)


def _manifest(tmp_path, path):
    from edgebert.bundle import read_manifest

    path.rename(tmp_path / "manifest.json")
    read_manifest(tmp_path)


def _tokenizer_json(tmp_path, path):
    from edgebert.exporters.tokenizer_info import tokenizer_metadata

    tokenizer_metadata(path)


def _checkpoint_pointer(tmp_path, path):
    from edgebert.training.state import POINTER_FILE, checkpoint_dir

    path.rename(tmp_path / POINTER_FILE)
    checkpoint_dir(tmp_path)


FILE_READERS = {"model config.json": (_model_config, ConfigError), "modules.json": (_modules_json, ConfigError),
                "manifest.json": (_manifest, BundleError), "tokenizer.json": (_tokenizer_json, CheckpointError),
                "resume pointer": (_checkpoint_pointer, CheckpointError)}


@pytest.mark.parametrize("content", ["deep", "surrogate"])
@pytest.mark.parametrize("reader", list(FILE_READERS))
def test_every_other_json_file_a_user_gives_is_one_line_naming_it(tmp_path, reader, content):
    path = tmp_path / "given.json"
    path.write_text(DEEP if content == "deep" else json.dumps({"name": LONE}), encoding="utf-8")
    read, error = FILE_READERS[reader]
    with pytest.raises(EdgebertError) as raised:
        read(tmp_path, path)
    line = raised.value.one_line()
    assert isinstance(raised.value, error) and "\n" not in line, line
    assert ".json" in line and ("nested too deeply" in line if content == "deep" else "lone surrogate at name" in line)


def test_the_silent_readers_take_an_unreadable_file_as_none(tmp_path):
    """Files edgebert falls back past (a model folder's tokenizer_config.json) or wrote itself (an output
    folder's marker): too deep or a lone surrogate reads as absent, never a RecursionError."""
    from edgebert.data.hf_tokenizer_files import do_lower_case, tokenizer_config
    from edgebert.files.outdirs import MARKER, read_marker

    for text in (DEEP, json.dumps({"do_lower_case": False, "x": LONE})):
        (tmp_path / "tokenizer_config.json").write_text(text)
        (tmp_path / MARKER).write_text(text)
        assert tokenizer_config(tmp_path) == {} and do_lower_case(tmp_path) is True
        assert read_marker(tmp_path) is None
