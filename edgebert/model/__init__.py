"""The model: a typed ``BertConfig``, the one-file BERT (``bert.py``), model directories on disk
(``checkpoint.py``) and students cut from a teacher (``student.py``)."""

from edgebert.model.bert import (  # noqa: F401
                   IGNORE_INDEX,
                   MODEL_CLASSES,
                   BertForMaskedLM,
                   BertForMultipleChoice,
                   BertForPreTraining,
                   BertForQuestionAnswering,
                   BertForSequenceClassification,
                   BertForTokenClassification,
                   BertModel,
                   EncoderOutput,
                   SpanOutput,
                   build_model,
                   count_parameters,
                   encoder_of,
                   freeze_word_embeddings,
                   has_mlm_head,
                   masked_positions_logits,
)
from edgebert.model.checkpoint import CONFIG_NAME, MODEL_OUTPUTS, WEIGHTS_NAME, load_model, read_state_dict, save_model  # noqa: F401
from edgebert.model.config import ARCHITECTURES, PRESETS, BertConfig  # noqa: F401
from edgebert.model.student import default_layer_map, make_student, parse_layer_map  # noqa: F401
