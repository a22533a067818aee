"""BERT in one file: embeddings, post-LN transformer encoder, pooler, and the task heads (pretraining,
masked LM, sequence and token classification, question answering spans, multiple choice).

Parameter names follow Hugging Face BERT exactly (``embeddings.word_embeddings.weight``,
``encoder.layer.N.attention.self.query.weight``, ``cls.predictions.transform.dense.weight`` ...), so
checkpoints move between edgebert and ``transformers`` without renaming. DistilBERT and RoBERTa
(``config.model_type``) are the same network with three flags: no token-type table (DistilBERT),
positions counted from ``pad_token_id + 1`` over the non-pad tokens (RoBERTa's
``create_position_ids_from_input_ids``), and the pooler's activation (DistilBERT's ``pre_classifier``
is a ReLU); their Hugging Face parameter names are translated on load and save (``families``).

Attention is written as separate Q/K/V projections -> scaled scores + additive mask -> softmax ->
matmul, the pattern ONNX Runtime's BERT optimizer fuses into one ``Attention`` op. A faster training
path uses ``torch.nn.functional.scaled_dot_product_attention`` (same numbers, tested); it is used
only when attention probabilities are not requested and the model is not being exported.

Shapes: B = batch, T = sequence length, H = hidden size, N = heads, D = head dim (H = N * D).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from edgebert.model.config import BertConfig

MASK_VALUE = -10000.0  # added to scores of padded keys (as original BERT; fp16-safe, fuses in ORT)
IGNORE_INDEX = -100    # label of positions no loss looks at (padding, unmasked tokens), as Hugging Face


def activation(name: str):
    if name == "gelu":
        return F.gelu  # exact (erf) GELU, as BERT
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    raise ValueError(name)


# --------------------------------------------------------------------------- outputs
@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor                    # (B, T, H)
    pooler_output: torch.Tensor | None = None          # (B, H)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # L+1 x (B, T, H), embeddings first
    attentions: tuple[torch.Tensor, ...] | None = None     # L x (B, N, T, T)


@dataclass
class PreTrainingOutput:
    loss: torch.Tensor | None
    mlm_loss: torch.Tensor | None
    nsp_loss: torch.Tensor | None
    prediction_logits: torch.Tensor                    # (B, T, V)
    seq_relationship_logits: torch.Tensor              # (B, 2)
    encoder: EncoderOutput


@dataclass
class MaskedLMOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor                               # (B, T, V)
    encoder: EncoderOutput


@dataclass
class ClassifierOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor                               # (B, C), (B, T, C) for tokens, (B, choices) for MC
    encoder: EncoderOutput


@dataclass
class SpanOutput:
    """A question-answering head's output: a start and an end score for every token."""

    loss: torch.Tensor | None
    start_logits: torch.Tensor                         # (B, T)
    end_logits: torch.Tensor                           # (B, T)
    encoder: EncoderOutput

    @property
    def span_logits(self) -> torch.Tensor:
        """(B, 2, T): start scores in row 0, end scores in row 1 (one softmax over T per row)."""
        return torch.stack([self.start_logits, self.end_logits], dim=1)


# --------------------------------------------------------------------------- encoder blocks
class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.offset, self.pad_id = cfg.position_offset, cfg.pad_token_id
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size,
                                                padding_idx=cfg.pad_token_id if self.offset else None)
        self.token_type_embeddings = (nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
                                      if cfg.model_type != "distilbert" else None)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(cfg.max_sequence_length)[None, :], persistent=False)
        # RoBERTa in an exported graph: positions offset + 0..T-1, the BERT pattern onnxruntime fuses; the
        # same as counting non-pad tokens for right-padded rows without pad ids inside (what the runtime feeds)
        self.static_positions = False

    def crop_positions(self, max_len: int) -> None:
        """Keep the position rows inputs of at most ``max_len`` tokens read (nanoGPT's crop_block_size): a graph
        exported for shorter inputs does not carry the rest."""
        rows = max_len + self.offset
        old = self.position_embeddings
        if rows >= old.num_embeddings:
            return
        self.position_embeddings = nn.Embedding(rows, old.embedding_dim, padding_idx=old.padding_idx)
        self.position_embeddings.weight = nn.Parameter(old.weight.detach()[:rows].clone(), old.weight.requires_grad)
        self.position_ids = self.position_ids[:, :max_len]

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        T = input_ids.shape[1]
        if not self.offset:
            position = self.position_embeddings(self.position_ids[:, :T])                 # (1, T, H)
        elif self.static_positions:
            position = F.embedding(self.position_ids[:, :T], self.position_embeddings.weight[self.offset:])
        else:   # transformers' create_position_ids_from_input_ids: pads keep padding_idx
            real = (input_ids != self.pad_id).long()
            position = self.position_embeddings(torch.cumsum(real, dim=1) * real + self.pad_id)  # (B, T, H)
        x = self.word_embeddings(input_ids)                                               # (B, T, H)
        if self.token_type_embeddings is not None:   # (summed in transformers' order: same rounding)
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x + position))


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.num_heads, self.head_dim = cfg.num_attention_heads, cfg.head_dim
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.attention_probs_dropout_prob)
        self.use_sdpa = True  # the fast path; BertModel.set_attention_impl switches it

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).permute(0, 2, 1, 3)  # (B, N, T, D)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor, output_attentions: bool = False):
        # x: (B, T, H); additive_mask: (B, 1, 1, T) with 0 for tokens and MASK_VALUE for padding
        q, k, v = self.split_heads(self.query(x)), self.split_heads(self.key(x)), self.split_heads(self.value(x))
        probs = None
        if self.use_sdpa and not output_attentions and not torch.onnx.is_in_onnx_export():
            ctx = F.scaled_dot_product_attention(
                q, k, v, attn_mask=additive_mask.to(q.dtype),
                dropout_p=self.dropout.p if self.training else 0.0)              # (B, N, T, D)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (B, N, T, T)
            scores = scores + additive_mask
            probs = F.softmax(scores, dim=-1)
            ctx = torch.matmul(self.dropout(probs), v)                          # (B, N, T, D)
        B, N, T, D = ctx.shape
        ctx = ctx.permute(0, 2, 1, 3).reshape(B, T, N * D)                      # (B, T, H)
        return ctx, probs


class BertSelfOutput(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, ctx: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(ctx)) + residual)   # post-LN, as BERT


class BertAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg)

    def forward(self, x, additive_mask, output_attentions=False):
        ctx, probs = self.self(x, additive_mask, output_attentions)
        return self.output(ctx, x), probs


class BertIntermediate(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.act = activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))                                    # (B, T, I)


class BertOutput(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(h)) + residual)


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertOutput(cfg)

    def forward(self, x, additive_mask, output_attentions=False):
        a, probs = self.attention(x, additive_mask, output_attentions)
        return self.output(self.intermediate(a), a), probs


class BertEncoder(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_hidden_layers))


class BertPooler(nn.Module):
    """tanh(dense([CLS])); DistilBERT's ``pre_classifier`` is the same with a ReLU."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = torch.relu if cfg.model_type == "distilbert" else torch.tanh

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x[:, 0]))                              # [CLS] -> (B, H)


def init_weights(module: nn.Module, std: float) -> None:
    """BERT initialisation: N(0, std) weights, zero biases, unit LayerNorm."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, 0.0, std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, 0.0, std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class BertModel(nn.Module):
    """The bare encoder: embeddings -> L layers -> pooler (none by default for DistilBERT, which has none)."""

    def __init__(self, cfg: BertConfig, add_pooling_layer: bool | None = None):
        super().__init__()
        if add_pooling_layer is None:
            add_pooling_layer = cfg.model_type != "distilbert"
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = BertEncoder(cfg)
        self.pooler = BertPooler(cfg) if add_pooling_layer else None
        self.apply(lambda m: init_weights(m, cfg.initializer_range))

    def set_attention_impl(self, impl: str) -> None:
        """'sdpa' (fast, default) or 'eager' (explicit softmax; what ONNX export traces)."""
        if impl not in ("sdpa", "eager"):
            raise ValueError(f"attention impl must be 'sdpa' or 'eager', not {impl!r}")
        for layer in self.encoder.layer:
            layer.attention.self.use_sdpa = impl == "sdpa"

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False) -> EncoderOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)                    # (B, T, H)
        # (B, T) of 1/0 -> (B, 1, 1, T) of 0/MASK_VALUE, broadcast over heads and queries
        additive_mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * MASK_VALUE
        hidden, attns = [x], []
        for layer in self.encoder.layer:
            x, probs = layer(x, additive_mask, output_attentions)
            hidden.append(x)
            attns.append(probs)
        return EncoderOutput(
            last_hidden_state=x,
            pooler_output=self.pooler(x) if self.pooler is not None else None,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(attns) if output_attentions else None,
        )


# --------------------------------------------------------------------------- heads
class BertPredictionHeadTransform(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        # RoBERTa's lm_head uses exact GELU whatever hidden_act says
        self.act = activation("gelu" if cfg.model_type in ("roberta", "xlm-roberta") else cfg.hidden_act)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x):
        return self.LayerNorm(self.act(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """Decoder weight is tied to the word embeddings; bias is its own (``cls.predictions.bias``)."""

    def __init__(self, cfg: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.transform = BertPredictionHeadTransform(cfg)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.decoder.weight = word_embeddings.weight                      # tied
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, x):
        return self.decoder(self.transform(x)) + self.bias                # (B, T, V)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, cfg, word_embeddings):
        super().__init__()
        self.predictions = BertLMPredictionHead(cfg, word_embeddings)

    def forward(self, x):
        return self.predictions(x)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, cfg, word_embeddings):
        super().__init__()
        self.predictions = BertLMPredictionHead(cfg, word_embeddings)
        self.seq_relationship = nn.Linear(cfg.hidden_size, 2)


def _init_heads(model: nn.Module, cfg: BertConfig, *modules: nn.Module) -> None:
    for m in modules:
        m.apply(lambda mod: init_weights(mod, cfg.initializer_range))
    if hasattr(model, "cls"):  # re-tie after init (init only touches the Linear's own weight object)
        model.cls.predictions.decoder.weight = model.bert.embeddings.word_embeddings.weight


class BertForPreTraining(nn.Module):
    """Masked LM + next sentence prediction; loss = MLM + NSP."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg, add_pooling_layer=True)
        self.cls = BertPreTrainingHeads(cfg, self.bert.embeddings.word_embeddings)
        _init_heads(self, cfg, self.cls.predictions.transform, self.cls.seq_relationship)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                next_sentence_label=None, output_hidden_states=False, output_attentions=False):
        enc = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        logits = self.cls.predictions(enc.last_hidden_state)
        nsp_logits = self.cls.seq_relationship(enc.pooler_output)
        mlm_loss = nsp_loss = loss = None
        if labels is not None:
            mlm_loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1),
                                       ignore_index=IGNORE_INDEX)
            loss = mlm_loss
        if next_sentence_label is not None:
            nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label.view(-1))
            loss = nsp_loss if loss is None else loss + nsp_loss
        return PreTrainingOutput(loss, mlm_loss, nsp_loss, logits, nsp_logits, enc)


class BertForMaskedLM(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(cfg, self.bert.embeddings.word_embeddings)
        _init_heads(self, cfg, self.cls.predictions.transform)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False, output_attentions=False):
        enc = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        logits = self.cls(enc.last_hidden_state)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1),
                                   ignore_index=IGNORE_INDEX)
        return MaskedLMOutput(loss, logits, enc)


class _Classifier(nn.Module):
    """BERT + dropout + ``classifier`` (hidden -> num_labels): over the pooled [CLS] (``pooled``) or every token."""
    pooled = True

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg, add_pooling_layer=self.pooled)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_labels)
        _init_heads(self, cfg, self.classifier)


class BertForSequenceClassification(_Classifier):
    pooled = True

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False, output_attentions=False):
        enc = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        logits = self.classifier(self.dropout(enc.pooler_output))            # (B, C)
        loss = None
        if labels is not None and logits.shape[-1] == 1:   # one relevance logit (a cross-encoder): binary CE
            loss = F.binary_cross_entropy_with_logits(logits.float()[:, 0], labels.view(-1).float())
        elif labels is not None:
            loss = F.cross_entropy(logits.float(), labels.view(-1))
        return ClassifierOutput(loss, logits, enc)


class BertForTokenClassification(_Classifier):
    pooled = False

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False, output_attentions=False):
        enc = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        logits = self.classifier(self.dropout(enc.last_hidden_state))        # (B, T, C)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1),
                                   ignore_index=IGNORE_INDEX)
        return ClassifierOutput(loss, logits, enc)


def span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, start_positions: torch.Tensor,
              end_positions: torch.Tensor) -> torch.Tensor:
    """Mean of the start and end cross-entropies over the T positions, as transformers computes it
    (positions beyond the sequence are clamped to T and ignored)."""
    ignored = start_logits.shape[1]
    start = F.cross_entropy(start_logits.float(), start_positions.view(-1).clamp(0, ignored), ignore_index=ignored)
    end = F.cross_entropy(end_logits.float(), end_positions.view(-1).clamp(0, ignored), ignore_index=ignored)
    return (start + end) / 2


class BertForQuestionAnswering(nn.Module):
    """Extractive question answering (SQuAD): a start and an end logit per token from one
    ``qa_outputs`` Linear(H, 2), as transformers' class of the same name (no pooler, no dropout)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(cfg.hidden_size, 2)
        _init_heads(self, cfg, self.qa_outputs)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, start_positions=None,
                end_positions=None, output_hidden_states=False, output_attentions=False):
        enc = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        logits = self.qa_outputs(enc.last_hidden_state)                      # (B, T, 2)
        start_logits, end_logits = logits.split(1, dim=-1)
        start_logits = start_logits.squeeze(-1).contiguous()                 # (B, T)
        end_logits = end_logits.squeeze(-1).contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return SpanOutput(loss, start_logits, end_logits, enc)


class BertForMultipleChoice(nn.Module):
    """One score per choice: input (B, choices, T) runs as B*choices sequences through the encoder,
    the pooled [CLS] of each through ``classifier`` Linear(H, 1) -> (B, choices) logits (transformers'
    ``BertForMultipleChoice`` names and numbers)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg, add_pooling_layer=True)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, 1)
        _init_heads(self, cfg, self.classifier)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False, output_attentions=False):
        choices = input_ids.shape[1]
        flat = lambda x: None if x is None else x.reshape(-1, x.shape[-1])  # noqa: E731  (B*choices, T)
        enc = self.bert(flat(input_ids), flat(attention_mask), flat(token_type_ids), output_hidden_states,
                        output_attentions)
        logits = self.classifier(self.dropout(enc.pooler_output)).view(-1, choices)   # (B, choices)
        loss = F.cross_entropy(logits.float(), labels.view(-1)) if labels is not None else None
        return ClassifierOutput(loss, logits, enc)


MODEL_CLASSES: dict[str, type[nn.Module]] = {
    "BertModel": BertModel,
    "BertForPreTraining": BertForPreTraining,
    "BertForMaskedLM": BertForMaskedLM,
    "BertForSequenceClassification": BertForSequenceClassification,
    "BertForTokenClassification": BertForTokenClassification,
    "BertForQuestionAnswering": BertForQuestionAnswering,
    "BertForMultipleChoice": BertForMultipleChoice,
}


def build_model(cfg: BertConfig, architecture: str | None = None) -> nn.Module:
    """A freshly initialised model of ``architecture`` (default: ``cfg.architecture``)."""
    arch = architecture or cfg.architecture
    cfg = cfg.replace(architecture=arch)
    cfg.check_memory()
    return MODEL_CLASSES[arch](cfg)


def encoder_of(model: nn.Module) -> BertModel:
    """The BertModel inside any of the classes above."""
    return model if isinstance(model, BertModel) else model.bert


def count_parameters(model: nn.Module) -> int:
    """Unique parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def has_mlm_head(model: nn.Module) -> bool:
    return hasattr(model, "cls") and hasattr(model.cls, "predictions")


def masked_positions_logits(model: nn.Module, input_ids, attention_mask, token_type_ids, labels,
                            **encoder_kwargs) -> tuple[EncoderOutput, torch.Tensor, torch.Tensor]:
    """(encoder output, (M, V) logits at the M positions with a label, (M,) targets) of an MLM model.

    The same logits as the full head at those positions, but the vocabulary projection runs only
    where ``labels`` is set (15% of tokens): the (B, T, V) logits would cost more CPU than the encoder.
    """
    enc = model.bert(input_ids, attention_mask, token_type_ids, **encoder_kwargs)
    selected = labels != IGNORE_INDEX                                        # (B, T)
    return enc, model.cls.predictions(enc.last_hidden_state[selected]), labels[selected]


def freeze_word_embeddings(model: nn.Module) -> None:
    """Keep the word-embedding matrix fixed: no (V x H) gradient and no optimizer update of it."""
    encoder_of(model).embeddings.word_embeddings.weight.requires_grad_(False)
