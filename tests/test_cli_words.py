"""Each command's help describes that command (check's --target / --max-accuracy-loss, answer's
--doc-stride, --threads of the torch-free commands); ``answer --context`` takes the text, a file or
``-`` (standard input); a training stage prints its start line (what it trains on, steps) before the first
step and the ETA after it, also with --no-progress."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest

from distill_helpers import make_model_dir, run_cli, write_toy_tsv
from edgebert.cli import main


def option_help(capsys, command: str, option: str) -> str:
    assert main([command, "-h"]) == 0
    text = " ".join(re.sub(r"(?<=\w)-\n\s+", "-", capsys.readouterr().out).split())
    match = re.search(re.escape(option) + r" <[^>]*> (.*?)(?= --[a-z]| -h,)", text)
    assert match, (command, option)
    return match.group(1)


def test_each_command_describes_its_own_options(capsys):
    target = option_help(capsys, "check", "--target")
    assert target.startswith("Check this INT8 graph") and "export" not in target
    loss = option_help(capsys, "check", "--max-accuracy-loss")
    assert "check" in loss or "this check" in loss.lower()
    assert "pipeline" not in loss and "export keeps" not in loss
    assert "check:" not in option_help(capsys, "export", "--target")
    assert "check defaults" not in option_help(capsys, "export", "--max-accuracy-loss")
    assert not option_help(capsys, "answer", "--doc-stride").startswith("squad")
    for command in ("answer", "check"):
        assert "torch" not in option_help(capsys, command, "--threads"), command
    assert "standard input" in option_help(capsys, "answer", "--context")


@pytest.fixture(scope="module")
def qa_bundle(tmp_path_factory):
    from edgebert.exporters.config import ExportConfig
    from edgebert.exporters.pipeline import export_bundle
    from edgebert.stages.import_hf import import_hf
    from family_fixtures import hf_dir

    tmp = tmp_path_factory.mktemp("answer-cli")
    src, _ = hf_dir(tmp, "roberta", "ForQuestionAnswering")
    return export_bundle(ExportConfig(model_dir=import_hf(src, tmp / "checkpoint"), out_dir=tmp / "bundle")).bundle_dir


def test_answer_context_is_text_a_file_or_stdin(qa_bundle, tmp_path, capsys, monkeypatch):
    text = " Zoë lives in Zürich and works for Acme in Paris."
    (tmp_path / "context.txt").write_text(text, encoding="utf-8")
    answers = []
    for context in (text, tmp_path / "context.txt", "-"):
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))
        code, out, err = run_cli(capsys, "answer", qa_bundle, "Where does Zoë live?", "--context", context,
                                 "--precision", "fp32", "--json")
        assert code == 0, err
        answer = json.loads(out)
        assert text[answer["start"]:answer["end"]] == answer["answer"]
        answers.append(answer)
    assert answers[0] == answers[1] == answers[2]


def test_finetune_prints_its_start_line_before_the_first_step(tmp_path, capsys):
    make_model_dir(tmp_path / "base", "BertForPreTraining")
    write_toy_tsv(tmp_path / "train.tsv", 40, seed=0)
    code, out, err = run_cli(capsys, "finetune", tmp_path / "base", "--task", "sst2", "--train", tmp_path / "train.tsv",
                             "--out", tmp_path / "ft", "--max-seq-len", "32", "--max-steps", "3", "--batch-size", "8", "--log-every", "3",
                             "--no-progress")
    assert code == 0, err
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("training on "))
    assert lines[start] == "training on 40 training examples: 3 steps of batch 8; ETA after the first step"
    eta = next(i for i, line in enumerate(lines) if line.startswith("step 1/3 took "))
    first_log = next(i for i, line in enumerate(lines) if line.startswith("step 3/3  loss"))
    assert start < eta < first_log and "ETA ~" in lines[eta]
