"""The shared training engine: config validation, optimizer groups, schedule, accumulation,
exact resume, metrics.jsonl, checkpoints, and the pretraining objective it runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from edgebert.errors import CheckpointError, ConfigError
from edgebert.training import (
    METRICS_FILE,
    POINTER_FILE,
    STATE_FILE,
    ShuffledBatches,
    TrainConfig,
    TrainingError,
    TrainingTask,
    build_optimizer,
    checkpoint_dir,
    lr_factor,
    train,
)


# ---------------------------------------------------------------------------- a toy task
class ToyRegression(TrainingTask):
    """y = x @ w + noise with a small MLP (with dropout, so resume must restore the RNG)."""

    def __init__(self, n: int = 64, dropout: float = 0.1, seed: int = 0, fail_at_batch: int | None = None,
                 interrupt_at_batch: int | None = None):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = self.x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)
        torch.manual_seed(seed)
        self.model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Dropout(dropout),
                                   nn.Linear(16, 1))
        self.batches_made = 0
        self.fail_at_batch, self.interrupt_at_batch = fail_at_batch, interrupt_at_batch
        self.keys_seen: list[int] = []

    def num_train_examples(self):
        return len(self.x)

    def make_batch(self, indices, keys):
        self.batches_made += 1
        if self.batches_made == self.fail_at_batch:
            raise RuntimeError("simulated crash")
        if self.batches_made == self.interrupt_at_batch:
            raise KeyboardInterrupt
        self.keys_seen.extend(keys)
        idx = torch.tensor(list(indices))
        return {"x": self.x[idx], "y": self.y[idx]}

    def loss(self, model, batch):
        err = model(batch["x"]) - batch["y"]
        return (err ** 2).mean(), {"mae": err.abs().mean().detach()}

    def evaluate(self, model):
        return {"mse": float(((model(self.x) - self.y) ** 2).mean())}

    def save(self, out_dir: Path):
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in self.model.state_dict().items()},
                  str(out_dir / "model.safetensors"))


def cfg(**kw) -> TrainConfig:
    base = dict(max_steps=12, batch_size=8, lr=1e-2, warmup_steps=2, log_every=1, eval_every=4,
                progress=False, seed=3)
    return TrainConfig(**{**base, **kw})


def losses(out: Path) -> list[tuple[int, float]]:
    lines = [json.loads(l) for l in (out / METRICS_FILE).read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in lines if "loss" in r]


def weights(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(out / "model.safetensors"))


# ---------------------------------------------------------------------------- config
@pytest.mark.parametrize("changes, match", [
    (dict(lr=-1.0), "lr=-1.0 must be a positive"),
    (dict(lr=float("nan")), "lr=nan"),
    (dict(warmup_steps=12), "warmup_steps=12 must be smaller than max_steps=12"),
    (dict(grad_accum=0), "grad_accum=0"),
    (dict(batch_size=0), "batch_size=0"),
    (dict(batch_size=8, grad_accum=3), "not divisible by grad_accum"),
    (dict(max_steps=0), "max_steps=0"),
    (dict(weight_decay=-0.1), "weight_decay"),
    (dict(log_every=0), "log_every=0"),
    (dict(device="tpu"), "device='tpu'"),
])
def test_config_rejects_bad_values(changes, match):
    with pytest.raises(ConfigError, match=match):
        cfg(**changes)


def test_presets_and_round_trip():
    for name in ("tiny", "demo", "wiki-small"):
        c = TrainConfig.preset(name)
        assert TrainConfig.from_dict(c.to_dict()) == c
    assert TrainConfig.preset("tiny", max_steps=50).max_steps == 50
    with pytest.raises(ConfigError, match="unknown training preset 'huge'"):
        TrainConfig.preset("huge")
    with pytest.raises(ConfigError, match="unknown training setting 'lrr'"):
        TrainConfig.from_dict({"lrr": 1})
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            TrainConfig(device="cuda")


def test_weight_decay_excludes_bias_and_layernorm(tiny_config):
    from edgebert.model import BertForPreTraining

    model = BertForPreTraining(tiny_config)
    opt = build_optimizer(model, cfg(weight_decay=0.05))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(not names[id(p)].endswith("bias") and "LayerNorm" not in names[id(p)]
               for p in decay["params"])
    assert all(names[id(p)].endswith("bias") or "LayerNorm" in names[id(p)] for p in no_decay["params"])
    # every parameter once (the tied decoder weight is the word embedding)
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert "bert.embeddings.word_embeddings.weight" in {names[id(p)] for p in decay["params"]}


def test_linear_warmup_then_linear_decay():
    c = cfg(max_steps=10, warmup_steps=4)
    factors = [lr_factor(s, c) for s in range(10)]
    assert factors[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert factors[4:] == pytest.approx([1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])
    assert lr_factor(10, c) == 0.0


def test_sampler_epochs_are_permutations_and_resumable():
    s = ShuffledBatches(10, 4, seed=1)
    drawn = [s.next_batch() for _ in range(5)]  # 20 examples = 2 epochs
    flat = [i for idx, _ in drawn for i in idx]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
    assert flat[:10] != flat[10:]
    assert [k for _, keys in drawn for k in keys] == list(range(20))
    t = ShuffledBatches(10, 4, seed=1)
    t.load_state_dict({"position": 8, "num_examples": 10})
    assert t.next_batch() == drawn[2]
    with pytest.raises(CheckpointError, match="trained on 11 examples"):
        t.load_state_dict({"position": 0, "num_examples": 11})


# ---------------------------------------------------------------------------- the loop
def test_training_reduces_loss_and_logs(tmp_path):
    task = ToyRegression(dropout=0.0)
    result = train(task, cfg(max_steps=40, eval_every=20, lr=3e-2), tmp_path / "run")
    records = [json.loads(l) for l in (tmp_path / "run" / METRICS_FILE).read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 41))
    assert {"loss", "mae", "lr", "grad_norm", "tokens_per_s", "epoch"} <= set(records[0])
    assert "eval_mse" in records[19] and "eval_mse" in records[39] and "eval_mse" not in records[20]
    assert records[-1]["loss"] < 0.25 * records[0]["loss"]
    assert result.step == 40 and result.eval_metrics["mse"] == pytest.approx(records[-1]["eval_mse"], rel=1e-4)
    assert records[0]["lr"] == pytest.approx(1e-2) and records[-1]["lr"] == pytest.approx(3e-2 / 38)
    # the checkpoint is a set (checkpoints/step-N/, named by checkpoint.json); its model files are
    # published in the run folder, the training state stays in the set
    ckpt = checkpoint_dir(tmp_path / "run")
    assert ckpt == tmp_path / "run" / "checkpoints" / "step-0000040"
    assert json.loads((tmp_path / "run" / POINTER_FILE).read_text()) == {"step": 40, "dir": "checkpoints/step-0000040"}
    for name in ("model.safetensors", "train_config.json"):
        assert (tmp_path / "run" / name).read_bytes() == (ckpt / name).read_bytes()
    assert not (tmp_path / "run" / STATE_FILE).exists()
    # the state loads with weights_only=True (tensors and plain types only)
    state = torch.load(ckpt / STATE_FILE, weights_only=True)
    assert state["step"] == 40 and state["sampler"]["position"] == 40 * 8


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    full = train(ToyRegression(), cfg(), tmp_path / "full")
    half = train(ToyRegression(), cfg(), tmp_path / "resumed", stop_at_step=6)
    assert half.step == 6 and len(losses(tmp_path / "resumed")) == 6
    rest = train(ToyRegression(), cfg(), tmp_path / "resumed", resume=True)
    assert rest.resumed_from == 6 and rest.step == 12
    a, b = losses(tmp_path / "full"), losses(tmp_path / "resumed")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 13))
    assert max(abs(x - y) for (_, x), (_, y) in zip(a, b)) < 1e-6
    wa, wb = weights(tmp_path / "full"), weights(tmp_path / "resumed")
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6
    assert full.eval_metrics["mse"] == pytest.approx(rest.eval_metrics["mse"], abs=1e-6)


def test_resume_after_a_crash_drops_log_lines_past_the_checkpoint(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(ToyRegression(fail_at_batch=10), cfg(save_every=4), out)
    assert [s for s, _ in losses(out)] == list(range(1, 10))  # logged 1..9, checkpoint at 8
    train(ToyRegression(), cfg(save_every=4), out, resume=True)
    assert [s for s, _ in losses(out)] == list(range(1, 13))
    reference = train(ToyRegression(), cfg(save_every=4), tmp_path / "ref")
    assert max(abs(x - y) for (_, x), (_, y) in zip(losses(out), losses(tmp_path / "ref"))) < 1e-6
    assert reference.step == 12


def test_interrupt_keeps_finished_steps(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train(ToyRegression(interrupt_at_batch=6), cfg(), out)
    state = torch.load(checkpoint_dir(out) / STATE_FILE, weights_only=True)
    assert state["step"] == 5
    assert train(ToyRegression(), cfg(), out, resume=True).step == 12


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    one = train(ToyRegression(dropout=0.0), cfg(grad_accum=1), tmp_path / "one")
    two = train(ToyRegression(dropout=0.0), cfg(grad_accum=4), tmp_path / "four")
    wa, wb = weights(tmp_path / "one"), weights(tmp_path / "four")
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5
    assert one.train_metrics["loss"] == pytest.approx(two.train_metrics["loss"], abs=1e-5)


def test_micro_batches_see_every_example_once_per_step(tmp_path):
    task = ToyRegression()
    train(task, cfg(max_steps=3, warmup_steps=0, grad_accum=2), tmp_path / "run")
    assert task.keys_seen == list(range(24)) and task.batches_made == 6


def test_bf16_autocast_on_cpu(tmp_path):
    result = train(ToyRegression(dropout=0.0), cfg(bf16=True, max_steps=20, lr=3e-2), tmp_path / "bf16")
    first, last = losses(tmp_path / "bf16")[0][1], result.train_metrics["loss"]
    assert last < 0.5 * first


def test_checkpoint_guards(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(CheckpointError, match="cannot resume"):
        train(ToyRegression(), cfg(), out, resume=True)
    train(ToyRegression(), cfg(max_steps=4), out)
    before = (out / "model.safetensors").read_bytes()
    with pytest.raises(CheckpointError, match="already holds a training checkpoint"):
        train(ToyRegression(), cfg(max_steps=4), out)
    assert (out / "model.safetensors").read_bytes() == before
    with pytest.raises(ConfigError, match="cannot resume with lr=0.5"):
        train(ToyRegression(), cfg(max_steps=8, lr=0.5), out, resume=True)
    (checkpoint_dir(out) / STATE_FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="corrupt"):
        train(ToyRegression(), cfg(max_steps=8), out, resume=True)


def test_nan_loss_stops_with_a_clear_error(tmp_path):
    task = ToyRegression()
    task.y[:] = float("nan")
    with pytest.raises(TrainingError, match=r"loss became nan \(gradient norm nan\) at step 1"):
        train(task, cfg(), tmp_path / "nan")


# ---------------------------------------------------------------------------- pretraining objective
def test_masked_positions_objective_equals_bert_for_pretraining_loss(tiny_config):
    from edgebert.model import BertForPreTraining
    from edgebert.stages.pretrain import MaskedPositionsObjective

    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config).eval()
    ids = torch.randint(5, tiny_config.vocab_size, (3, 20))
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    types = (torch.arange(20) >= 9).long().expand(3, 20)
    labels = torch.full_like(ids, -100)
    labels[:, 3:6] = ids[:, 3:6]
    nsp = torch.tensor([0, 1, 1])
    full = model(ids, mask, types, labels=labels, next_sentence_label=nsp)
    sparse = MaskedPositionsObjective(model)(ids, mask, types, labels, nsp)
    assert sparse.loss.item() == pytest.approx(full.loss.item(), abs=1e-5)
    assert sparse.mlm_loss.item() == pytest.approx(full.mlm_loss.item(), abs=1e-5)
    assert sparse.nsp_loss.item() == pytest.approx(full.nsp_loss.item(), abs=1e-6)
    assert torch.allclose(sparse.mlm_logits, full.prediction_logits[labels != -100], atol=1e-5)


def test_edgebert_max_steps_caps_every_run_and_says_so(monkeypatch):
    """make test-readme walks the README's training commands at a few steps each (EDGEBERT_MAX_STEPS)."""
    from edgebert.errors import ConfigError
    from edgebert.training.config import STEP_CAP_ENV, TrainConfig

    cfg = TrainConfig(max_steps=300, eval_every=100, save_every=100, warmup_steps=30, log_every=50)
    monkeypatch.delenv(STEP_CAP_ENV, raising=False)
    assert cfg.capped() is cfg
    monkeypatch.setenv(STEP_CAP_ENV, "20")
    capped = cfg.capped()
    assert (capped.max_steps, capped.eval_every, capped.save_every, capped.log_every) == (20, 20, 20, 20)
    assert capped.warmup_steps is None                       # 30 >= 20: back to the ratio
    assert TrainConfig(max_steps=10).capped().max_steps == 10  # under the cap: as it was
    monkeypatch.setenv(STEP_CAP_ENV, "0")
    with pytest.raises(ConfigError, match="EDGEBERT_MAX_STEPS='0' must be a whole number of steps >= 1"):
        cfg.capped()
