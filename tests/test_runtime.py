"""Torch-free runtime: numbers equal the PyTorch model, thread safety, providers, bad input, tampering."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from edgebert.bundle import model_path, sha256_file
from edgebert.errors import BundleError, ConfigError, DataError, ProviderUnavailable
from edgebert.runtime import EdgeSession, probe
from edgebert.runtime.text import longest_first
from runtime_fixtures import tiny_bundle

TEXTS = ["the film was good", "a bad movie .", "the story is great and the actors are good but the end is a mess",
         "boring", "one of the best films of the year !", "i did not like it"]


@pytest.fixture(scope="module")
def embed_bundle(tmp_path_factory):
    return tiny_bundle(tmp_path_factory.getbasetemp(), "embed")


@pytest.fixture(scope="module")
def fp32(embed_bundle):
    return EdgeSession(embed_bundle[1], provider="cpu", precision="fp32", threads=1)


def torch_outputs(model_dir, rows, architecture="BertModel"):
    """The PyTorch model on the runtime's own padded token ids (skipped in a torch-free install)."""
    torch = pytest.importorskip("torch")

    from edgebert.model import load_model
    from edgebert.runtime import pad_batch

    model = load_model(model_dir, architecture).eval()
    feeds = pad_batch(rows)
    with torch.inference_mode():
        out = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
    return feeds, out


def test_fp32_embeddings_equal_pytorch(embed_bundle, fp32):
    model_dir, _ = embed_bundle
    feeds, out = torch_outputs(model_dir, fp32.tokenize(TEXTS))
    hidden = out.last_hidden_state.numpy()
    mask = feeds["attention_mask"][:, :, None]
    ref_mean = (hidden * mask).sum(1) / mask.sum(1)
    ref_mean /= np.linalg.norm(ref_mean, axis=1, keepdims=True)
    ours = fp32.embed(TEXTS)
    assert ours.shape == (len(TEXTS), 64) and ours.dtype == np.float32
    assert np.abs(ours - ref_mean).max() <= 1e-4
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    raw = fp32.embed(TEXTS, pooling="cls", normalize=False)
    assert np.abs(raw - hidden[:, 0]).max() <= 1e-4
    run = fp32.run(feeds)
    assert np.abs((run["last_hidden_state"] - hidden) * mask).max() <= 1e-4
    assert np.abs(run["pooler_output"] - out.pooler_output.numpy()).max() <= 1e-4


def test_int8_close_to_fp32_and_smaller(embed_bundle, fp32):
    int8 = EdgeSession(embed_bundle[1], provider="cpu", precision="int8", threads=1)
    a, b = fp32.embed(TEXTS), int8.embed(TEXTS)
    cosine = (a * b).sum(1)
    assert cosine.min() > 0.99, cosine
    assert not np.array_equal(a, b)  # it really is another model
    assert int8.model_file.stat().st_size < fp32.model_file.stat().st_size


def test_batching_sorts_by_length_and_restores_order(fp32):
    one_by_one = np.stack([fp32.embed([t])[0] for t in TEXTS])
    batched = fp32.embed(TEXTS, batch_size=4)   # two length-sorted, dynamically padded batches
    assert np.abs(batched - one_by_one).max() < 1e-5
    reordered = fp32.embed(TEXTS[::-1], batch_size=4)
    assert np.abs(reordered[::-1] - batched).max() < 1e-5


def test_token_cap_keeps_long_rows_in_small_batches():
    from edgebert.runtime.text import Encoded, length_sorted_batches

    lengths = [400, 20, 300, 12, 250] + [30] * 40 + [8] * 9
    rows = [Encoded(np.ones(n, np.int64), np.zeros(n, np.int64)) for n in lengths]
    capped = list(length_sorted_batches(rows, 32, max_tokens=600))
    assert sorted(int(i) for b in capped for i in b) == list(range(len(rows)))        # every row once
    assert [lengths[int(b[0])] for b in capped[:3]] == [400, 300, 30]                 # longest first
    assert [len(b) for b in capped] == [1, 2, 20, 20, 11]        # 600 // 400 = 1 row; // 300 = 2; // 30 = 20
    assert all(len(b) * max(lengths[int(i)] for i in b) <= 600 for b in capped)
    plain = list(length_sorted_batches(rows, 32))
    assert [len(b) for b in plain] == [32, 22]
    assert max(lengths[int(i)] for i in plain[0]) * 32 == 12800        # what the cap avoids: 32 rows padded to 400


def test_batch_tokens_default_and_results(embed_bundle, fp32):
    assert fp32.batch_tokens == 1024 and fp32.describe()["batch_tokens"] == 1024      # the CPU default
    texts = TEXTS + [" ".join(TEXTS)] * 3
    uncapped = EdgeSession(embed_bundle[1], provider="cpu", precision="fp32", threads=1, batch_tokens=0)
    capped = EdgeSession(embed_bundle[1], provider="cpu", precision="fp32", threads=1, batch_tokens=40)
    assert uncapped.batch_tokens == 0
    assert np.abs(capped.embed(texts) - uncapped.embed(texts)).max() < 1e-5
    for bad in (-1, 1.5, "many"):
        with pytest.raises(ConfigError, match="batch_tokens"):
            EdgeSession(embed_bundle[1], provider="cpu", precision="fp32", batch_tokens=bad)


def test_concurrent_callers_match_serial_calls(embed_bundle):
    session = EdgeSession(embed_bundle[1], provider="cpu", precision="int8", threads=1)
    inputs = [TEXTS[i:i + 1 + i % 3] for i in range(len(TEXTS))]
    serial = [session.embed(x) for x in inputs]
    mismatches, errors, done = [], [], []

    def worker(k: int) -> None:
        try:
            for i in range(500):
                j = (i + k) % len(inputs)
                done.append(1)
                if not np.array_equal(session.embed(inputs[j]), serial[j]):
                    mismatches.append((k, i))
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:1]
    assert len(done) == 8 * 500
    assert not mismatches, f"{len(mismatches)} of 4000 concurrent calls differ from serial calls"


def test_runtime_never_imports_torch(embed_bundle):
    code = (
        "import sys\n"
        "from edgebert.runtime import EdgeSession\n"
        f"s = EdgeSession({str(embed_bundle[1])!r}, provider='auto', precision='int8')\n"
        "v = s.embed(['a good film', 'bad'])\n"
        "assert v.shape == (2, 64), v.shape\n"
        "print(sorted(m for m in ('torch', 'transformers', 'onnx') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout   # neither torch nor transformers nor onnx


def test_tampered_or_incomplete_bundle_rejected(embed_bundle, tmp_path):
    bad = tmp_path / "bundle"
    shutil.copytree(embed_bundle[1], bad)
    data = bytearray(model_path(bad, "int8").read_bytes())
    data[len(data) // 2] ^= 0xFF
    model_path(bad, "int8").write_bytes(bytes(data))
    with pytest.raises(BundleError, match="does not match its manifest hash"):
        EdgeSession(bad, provider="cpu", precision="int8")
    shutil.copy(model_path(embed_bundle[1], "int8"), model_path(bad, "int8"))
    EdgeSession(bad, provider="cpu", precision="int8")                  # restored: loads again
    (bad / "tokenizer.json").unlink()
    with pytest.raises(BundleError, match="tokenizer.json is missing"):
        EdgeSession(bad, provider="cpu", precision="fp32")
    with pytest.raises(BundleError, match="no manifest.json"):
        EdgeSession(tmp_path, provider="cpu")
    with pytest.raises(BundleError, match="no fp16 model"):
        EdgeSession(embed_bundle[1], provider="cpu", precision="fp16")


def test_empty_overlong_and_non_string_inputs(fp32):
    empty = fp32.embed([])
    assert empty.shape == (0, 64) and empty.dtype == np.float32
    # empty string: documented as the embedding of "[CLS] [SEP]"
    assert [len(r) for r in fp32.tokenize([""])] == [2]
    assert np.isfinite(fp32.embed([""])).all()
    # a single str is a batch of one
    assert fp32.embed("the film").shape == (1, 64)
    # over-long text: truncated to max_length by default, or rejected on request
    long_text = " ".join(["good"] * 400)
    rows = fp32.tokenize([long_text])
    assert len(rows[0]) == fp32.max_length == 128 and rows[0].truncated
    assert rows[0].ids[-1] == fp32.manifest["tokenizer"]["sep_id"]     # [SEP] kept after cutting
    exact = " ".join(["good"] * 126)                                    # 126 + [CLS] + [SEP] = 128
    assert np.abs(fp32.embed([long_text]) - fp32.embed([exact])).max() < 1e-6
    with pytest.raises(DataError, match=r"input 1 is 402 tokens, longer than max_length=128"):
        fp32.embed(["fine", long_text], truncate=False)
    strict = EdgeSession(fp32.bundle_dir, provider="cpu", precision="fp32", truncate=False, max_length=16)
    with pytest.raises(DataError, match="longer than max_length=16"):
        strict.embed(["a film " * 10])
    for bad, match in ((None, "NoneType"), (3, "int"), (b"bytes", "bytes"), (["ok", 5], r"texts\[1\] is a int"),
                       (["ok", None], r"texts\[1\] is None"), ([("a", "b")], "a text pair")):
        with pytest.raises(DataError, match=match):
            fp32.embed(bad)
    with pytest.raises(ConfigError, match="pooling"):
        fp32.embed(["x"], pooling="max")
    with pytest.raises(ConfigError, match="needs a 'cls' bundle"):
        fp32.classify(["x"])
    with pytest.raises(ConfigError, match="max_length=1000"):
        EdgeSession(fp32.bundle_dir, provider="cpu", max_length=1000)


def test_tokenizer_padding_state_in_bundle_is_ignored(embed_bundle, tmp_path, fp32):
    """tokenizer.json files that switch on fixed padding/truncation (all-MiniLM-L6-v2 does) must not
    leak into the runtime: dynamic padding and our own truncation rules still apply."""
    from tokenizers import Tokenizer

    bundle = tmp_path / "bundle"
    shutil.copytree(embed_bundle[1], bundle)
    tok = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    tok.enable_padding(length=100)
    tok.enable_truncation(max_length=5)
    tok.save(str(bundle / "tokenizer.json"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"]["tokenizer.json"] = sha256_file(bundle / "tokenizer.json")
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    session = EdgeSession(bundle, provider="cpu", precision="fp32")
    assert [len(r) for r in session.tokenize(TEXTS)] == [len(r) for r in fp32.tokenize(TEXTS)]
    assert np.abs(session.embed(TEXTS) - fp32.embed(TEXTS)).max() < 1e-6


def test_providers_report_what_they_really_got(embed_bundle):
    auto = EdgeSession(embed_bundle[1], provider="auto", precision="int8")
    assert auto.providers[0] in ("CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider")
    assert auto.provider_notes[-1].startswith(f"running on {auto.provider}")
    for name in ("cuda", "tensorrt"):
        status = probe(name)
        if status.available:
            continue
        assert status.reason                                             # says why
        assert any(n.startswith(f"{name}: not used, {status.reason}") for n in auto.provider_notes)
        with pytest.raises(ProviderUnavailable, match=f"provider '{name}' is unavailable"):
            EdgeSession(embed_bundle[1], provider=name, precision="int8")
    if not probe("cuda").available:
        assert auto.providers == ["CPUExecutionProvider"]                 # never claims a GPU it lacks
    with pytest.raises(ConfigError, match="unknown provider"):
        EdgeSession(embed_bundle[1], provider="gpu")


def test_provider_that_probes_fine_but_falls_back_is_caught(embed_bundle, monkeypatch):
    """If the pre-check is fooled (libraries load, GPU unusable), the session's own provider list
    still decides (onnxruntime's node placement): an explicit request fails, auto says what happened and
    reports the CPU."""
    from edgebert.runtime import providers

    if probe("cuda").available:
        pytest.skip("this machine really has CUDA")
    monkeypatch.setattr(providers, "probe", lambda name: providers.ProviderStatus(name, True))
    with pytest.raises(ProviderUnavailable, match=r"assigned no node to cuda \(nodes: cpu \d+ of \d+"):
        EdgeSession(embed_bundle[1], provider="cuda", precision="fp32")
    auto = EdgeSession(embed_bundle[1], provider="auto", precision="fp32")
    assert auto.providers == ["CPUExecutionProvider"] and auto.provider == "cpu"
    assert auto.placement.nodes == {"cpu": auto.placement.total} and auto.placement.total > 0
    assert any(n.startswith("cuda (fp32): failed [no node assigned]") for n in auto.provider_notes)
    assert any(n.startswith("tensorrt: failed [no graph]") for n in auto.provider_notes)   # no fp32-trt graph


def test_classify_texts_and_pairs_match_pytorch(tmp_path_factory):
    model_dir, bundle = tiny_bundle(tmp_path_factory.getbasetemp(), "cls")
    session = EdgeSession(bundle, provider="cpu", precision="fp32")
    pairs = [("the film was good", "a great movie"), ("boring", "the story is a mess and the end is bad")]
    for inputs in (TEXTS, pairs):
        result = session.classify(inputs, batch_size=4)
        feeds, out = torch_outputs(model_dir, session.tokenize(inputs), "BertForSequenceClassification")
        probs = out.logits.softmax(-1).numpy()
        assert len(result) == len(inputs) and result.label_names == ["negative", "positive"]
        assert np.abs(result.probabilities - probs).max() <= 1e-4
        np.testing.assert_allclose(result.probabilities.sum(1), 1.0, atol=1e-6)
        assert list(result.label_ids) == list(probs.argmax(1))
        assert result.labels == [result.label_names[i] for i in result.label_ids]
    pair_rows = session.tokenize(pairs)
    assert set(pair_rows[0].type_ids.tolist()) == {0, 1}                 # segment ids reach the model
    assert len(session.classify([])) == 0
    assert session.classify("good").as_dicts()[0]["label"] in ("negative", "positive")


def test_pair_truncation_is_longest_first(tmp_path_factory):
    assert longest_first(10, 3, 8) == (5, 3)
    assert longest_first(4, 4, 6) == (3, 3)
    _, bundle = tiny_bundle(tmp_path_factory.getbasetemp(), "cls")
    session = EdgeSession(bundle, provider="cpu", precision="fp32", max_length=12)
    row = session.tokenize([("good " * 20, "bad film")])[0]
    assert len(row) == 12 and row.truncated
    assert row.type_ids.tolist().count(1) == 3                           # "bad film [SEP]" kept whole


def test_fill_mask_matches_pytorch(tmp_path_factory):
    model_dir, bundle = tiny_bundle(tmp_path_factory.getbasetemp(), "mlm")
    session = EdgeSession(bundle, provider="cpu", precision="fp32")
    text = "the [MASK] was good and the [MASK] was bad"
    predictions = session.fill_mask(text, top_k=4)
    _, out = torch_outputs(model_dir, session.tokenize([text]), "BertForMaskedLM")
    assert [p.position for p in predictions] == [2, 7]
    for p in predictions:
        ref = out.logits[0, p.position].softmax(-1).numpy()
        assert p.token_ids == list(np.argsort(-ref, kind="stable")[:4])
        assert np.abs(np.asarray(p.scores) - ref[p.token_ids]).max() <= 1e-4
        assert p.scores == sorted(p.scores, reverse=True) and p.best == p.tokens[0]
    with pytest.raises(DataError, match=r"no \[MASK\] token"):
        session.fill_mask("nothing to fill")
    with pytest.raises(DataError, match="takes one str"):
        session.fill_mask(["a [MASK]"])


def test_example_app_runs(embed_bundle):
    app = Path(__file__).resolve().parents[1] / "examples" / "embed_app.py"
    done = subprocess.run([sys.executable, str(app), str(embed_bundle[1]), "a cat", "rates"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("'a cat' -> ") and lines[1].startswith("'rates' -> ")
    assert lines[2].startswith("ran on cpu" if not probe("cuda").available else "ran on ")


@pytest.mark.slow
def test_minilm_bundle_matches_pytorch(minilm_dir, tmp_path):
    """The real all-MiniLM-L6-v2: fp32 embeddings equal PyTorch's, INT8 stays close (SST-2 dev texts)."""
    from conftest import shared_file
    from edgebert.exporters import ExportConfig, export_bundle

    texts = [line.split("\t")[0] for line in shared_file("sst2", "dev.tsv").read_text().splitlines()[1:65]]
    export_bundle(ExportConfig(model_dir=minilm_dir, out_dir=tmp_path / "bundle", int8=True))
    fp32 = EdgeSession(tmp_path / "bundle", provider="cpu", precision="fp32")
    feeds, out = torch_outputs(minilm_dir, fp32.tokenize(texts))
    mask = feeds["attention_mask"][:, :, None]
    ref = (out.last_hidden_state.numpy() * mask).sum(1) / mask.sum(1)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    assert np.abs(fp32.embed(texts) - ref).max() <= 1e-4
    int8 = EdgeSession(tmp_path / "bundle", provider="cpu", precision="int8")
    cosine = (int8.embed(texts) * ref).sum(1)
    assert cosine.mean() > 0.98 and cosine.min() > 0.95, (cosine.mean(), cosine.min())
