"""4-bit-aware distillation (issue #50): the rounding is onnxruntime's, the gradient passes straight through,
the saved student is already rounded, and its small graph then equals its fp32 graph (tiny seeded models)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from distill_helpers import make_model_dir, write_toy_corpus
from edgebert.errors import ConfigError
from edgebert.stages.distill import DistillConfig, distill
from edgebert.stages.distill.int4_aware import four_bit_linears, make_int4_aware, round_4bit
from edgebert.training import TrainConfig


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("int4aware")
    make_model_dir(root / "encoder", "BertModel", layers=2)          # hidden 64, FFN 128
    write_toy_corpus(root / "corpus.txt")
    return root


def test_rounding_is_onnxruntimes_matmulnbits():
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    k, n = 64, 6
    weight = np.random.default_rng(1).normal(size=(n, k)).astype(np.float32)      # torch layout [out, in]
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "B"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                              [numpy_helper.from_array(weight.T.copy(), "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    algo = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, accuracy_level=0)
    quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True, accuracy_level=0, algo_config=algo)
    quantizer.process()
    assert [node.op_type for node in quantizer.model.model.graph.node] == ["MatMulNBits"]
    session = ort.InferenceSession(quantizer.model.model.SerializeToString(), providers=["CPUExecutionProvider"])
    onnx.checker.check_model(quantizer.model.model)
    eye = np.eye(k, dtype=np.float32)
    ort_weight = np.stack([session.run(None, {"x": eye[i:i + 1]})[0][0] for i in range(k)]).T     # [n, k]
    ours = round_4bit(torch.from_numpy(weight), 32).numpy()
    assert np.abs(ours - ort_weight).max() < 1e-6 and np.abs(ours - weight).max() > 0.01
    assert np.abs(round_4bit(torch.from_numpy(ours), 32).numpy() - ours).max() < 1e-7   # rounding twice: the same


def test_gradient_passes_straight_through(toy):
    from edgebert.model import load_model

    model = load_model(toy / "encoder")
    assert make_int4_aware(model, 32) == 13     # 2 layers x (q, k, v, attention out, FFN in, out) + the pooler
    linear = four_bit_linears(model)["encoder.layer.0.intermediate.dense"]
    x = torch.randn(3, 64)
    y = linear(x)
    want = x @ round_4bit(linear.weight.detach(), 32).T + linear.bias
    assert torch.allclose(y, want, atol=1e-5)
    y.sum().backward()
    assert torch.allclose(linear.weight.grad, x.sum(0).expand_as(linear.weight), atol=1e-5)


def test_config_refuses_a_block_for_task_distillation(toy, tmp_path):
    with pytest.raises(ConfigError, match="int4-aware"):
        DistillConfig(teacher=toy / "encoder", out=tmp_path / "s", task="embed", corpus=(toy / "corpus.txt",),
                      int4_block=24)


def test_an_int4_aware_student_is_saved_rounded_and_its_small_graph_follows_it(toy, tmp_path):
    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.model import load_model
    from edgebert.runtime import EdgeSession

    cfg = DistillConfig(teacher=toy / "encoder", out=tmp_path / "student", task="embed", corpus=(toy / "corpus.txt",),
                        layers=2, alpha_kd=0.0, alpha_mlm=0.0, max_seq_len=32, max_eval_examples=16,
                        eval_batch_size=8, int4_block=16,
                        train=TrainConfig(max_steps=20, batch_size=8, lr=1e-3, warmup_ratio=0.0, log_every=1,
                                          eval_every=20, save_every=20, progress=False))
    distill(cfg)
    losses = [json.loads(line)["loss"] for line in (cfg.out / "metrics.jsonl").read_text().splitlines()
              if "loss" in json.loads(line)]
    assert len(losses) == 20 and np.isfinite(losses).all()
    saved = four_bit_linears(load_model(cfg.out))
    assert len(saved) == 13                                       # 2 layers x 6 + the pooler
    for layer in saved.values():                                  # on the 4-bit grid already
        weight = layer.weight.detach()
        assert (round_4bit(weight, 16) - weight).abs().max() < 1e-7 and (weight.abs() > 0).any()
    bundle = tmp_path / "bundle"
    export_bundle(ExportConfig(model_dir=cfg.out, out_dir=bundle, task="embed", int8=True, int4=True,
                               validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    entry = json.loads((bundle / "manifest.json").read_text())["models"]["int4"]
    assert entry["quantization"]["eight_bit"] == []                 # nothing left to keep 8-bit
    q = entry["quantization"]
    assert q["block_size"] == q["table_block"] == 16                # the block it trained at (distill_config.json)
    texts = ["the film was good", "a bad movie that nobody liked at all", "one more text"]
    fp32 = EdgeSession(bundle, provider="cpu", precision="fp32", threads=1).embed(texts)
    small = EdgeSession(bundle, provider="cpu", precision="int4", threads=1).embed(texts)
    assert (fp32 * small).sum(axis=1).min() > 0.999                # int8 activations and the 4-bit table remain


def test_a_classification_student_trains_4bit_aware_with_its_head(tmp_path):
    """--task sst2 --int4-aware: the pooler and classifier are trained and saved on the grid with the encoder
    (the export makes them MatMulNBits too), and the small graph keeps the fp32 graph's labels."""
    from distill_helpers import write_toy_tsv
    from edgebert.exporters import ExportConfig, export_bundle
    from edgebert.model import load_model
    from edgebert.runtime import EdgeSession

    teacher = make_model_dir(tmp_path / "teacher", "BertForSequenceClassification", layers=2,
                             id2label={0: "negative", 1: "positive"})
    train, dev = write_toy_tsv(tmp_path / "train.tsv", 64), write_toy_tsv(tmp_path / "dev.tsv", 24, seed=1)
    cfg = DistillConfig(teacher=teacher, out=tmp_path / "student", task="sst2", train_file=train, dev_file=dev,
                        layers=1, int4_block=32, max_seq_len=32, alpha_mlm=0.0, alpha_kd=1.0,
                        train=TrainConfig(max_steps=4, batch_size=8, lr=1e-3, warmup_ratio=0.0, log_every=2,
                                          eval_every=4, save_every=4, progress=False))
    distill(cfg)
    linears = four_bit_linears(load_model(cfg.out))
    assert {"bert.pooler.dense", "classifier"} <= set(linears) and len(linears) == 8
    for layer in linears.values():
        assert (round_4bit(layer.weight.detach(), 32) - layer.weight.detach()).abs().max() < 1e-7
    bundle = tmp_path / "bundle"
    export_bundle(ExportConfig(model_dir=cfg.out, out_dir=bundle, int8=True, int4=True, int4_accuracy_level=1,
                               validation_batch_sizes=(1, 3), validation_seq_lens=(7, 32)))
    entry = json.loads((bundle / "manifest.json").read_text())["models"]["int4"]
    assert entry["quantization"]["eight_bit"] == [] and entry["requires"]["u8s8_exact"] is False
    texts = [line.split("\t")[0] for line in dev.read_text().splitlines()[1:]]
    fp32 = EdgeSession(bundle, provider="cpu", precision="fp32", threads=1).logits(texts)
    small = EdgeSession(bundle, provider="cpu", precision="int4", threads=1).logits(texts)
    assert np.abs(fp32 - small).max() < 1e-3
    clear = np.abs(fp32[:, 1] - fp32[:, 0]) > 2e-3          # labels compared where the logits' margin allows
    assert clear.sum() >= len(texts) // 2 and (fp32.argmax(-1) == small.argmax(-1))[clear].all()


def test_distill_continues_from_a_trained_students_folder(toy, tmp_path):
    """``--init DIR``: a float student fine-tuned 4-bit-aware starts from its own weights (its held-out agreement
    at the start is the one it ended with), and a student of another shape is refused in one line."""
    from edgebert.model import load_model

    def cfg(out, layers=1, **fields):
        return DistillConfig(teacher=toy / "encoder", out=out, task="embed", corpus=(toy / "corpus.txt",),
                             layers=layers, alpha_kd=0.0, alpha_mlm=0.0, max_seq_len=32, max_eval_examples=16,
                             eval_batch_size=8, **fields,
                             train=TrainConfig(max_steps=6, batch_size=8, lr=1e-3, warmup_ratio=0.0, log_every=1,
                                               eval_every=6, save_every=6, progress=False))

    first = distill(cfg(tmp_path / "float", layer_map=(0,)))           # evenly spaced would be [1]
    again = distill(cfg(tmp_path / "again", student_init=str(first.out_dir)))
    key = "embedding_cosine_mean"
    assert again.layer_map == [0]                                        # the map it was trained with
    assert abs(again.start_metrics[key] - first.eval_metrics[key]) < 1e-6
    fresh = distill(cfg(tmp_path / "fresh"))
    assert abs(fresh.start_metrics[key] - first.eval_metrics[key]) > 1e-4   # the teacher's layers start elsewhere
    aware = distill(cfg(tmp_path / "aware", student_init=str(first.out_dir), int4_block=16))
    for layer in four_bit_linears(load_model(aware.out_dir)).values():     # fine-tuned and saved on the grid
        assert (round_4bit(layer.weight.detach(), 16) - layer.weight.detach()).abs().max() < 1e-7
    with pytest.raises(ConfigError, match=r"has \(layers, hidden, heads, FFN\) \(1, 64, 4, 128\); this run asks "
                                          r"for \(2, 64, 4, 128\)"):
        distill(cfg(tmp_path / "two", layers=2, student_init=str(first.out_dir)))
    with pytest.raises(ConfigError, match="not teacher, random, or a folder with a config.json"):
        cfg(tmp_path / "bad", student_init=str(tmp_path / "nowhere"))
