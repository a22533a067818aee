"""The model: a typed ``BertConfig``, the one-file BERT (``bert.py``), model directories on disk
(``checkpoint.py``) and students cut from a teacher (``student.py``)."""

from .bert import (IGNORE_INDEX, MODEL_CLASSES, BertForMaskedLM, BertForMultipleChoice,  # noqa: F401
                   BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification,
                   BertForTokenClassification, BertModel, EncoderOutput, SpanOutput, build_model,
                   count_parameters, encoder_of, freeze_word_embeddings, has_mlm_head, masked_positions_logits)
from .checkpoint import (CONFIG_NAME, MODEL_OUTPUTS, WEIGHTS_NAME, load_model, read_state_dict,  # noqa: F401
                         save_model)
from .config import ARCHITECTURES, PRESETS, BertConfig  # noqa: F401
from .student import default_layer_map, make_student, parse_layer_map  # noqa: F401
