"""The training engine shared by pretraining, distillation and fine-tuning.

A stage describes *what* to train as a ``TrainingTask`` (the module to optimise, how to build a
batch from example indices, the loss, evaluation, and how to save the model files); the ``Trainer``
does the rest the same way for every stage. By job:

- ``config``: ``TrainConfig`` and its presets (warmup as a fraction of the run unless set in steps).
- ``batches``: ``ShuffledBatches`` draws ``batch_size`` example indices per optimizer step from a
  stream reshuffled every epoch with ``(seed, epoch)`` (``LengthGroupedBatches``: similar lengths
  together). Every example of the stream has a key (its position in the stream) that the task may
  use to seed per-example randomness (e.g. MLM masking), so a batch does not depend on how it is
  split across processes or whether the run was resumed.
- ``optim``: AdamW (no weight decay on biases and LayerNorm weights), linear warmup then linear decay.
- ``distributed``: under ``torchrun`` the trainer joins the process group (gloo on CPU, nccl on GPU)
  and wraps the model in DistributedDataParallel; only rank 0 writes files, logs and evaluates.
  ``batch_size`` is the *global* batch of one optimizer step: each of the W processes takes its
  contiguous 1/W of it and splits that into ``grad_accum`` micro-batches (W processes with
  ``grad_accum=A`` give the same update as one process with ``grad_accum=W*A``).
- ``state``: checkpoint *sets* (``checkpoints/step-N/``: the task's model files and ``training_state.pt``
  with model + optimizer + scheduler state, step, RNG states, data position, config), committed by an
  atomic switch of the ``checkpoint.json`` pointer, then published in the output directory;
  ``resume=True`` continues exactly where the committed set left off. ``metrics.jsonl``: one
  JSON object per logged step (train metrics averaged since the last log, lr, grad norm, tokens/s,
  and ``eval_*`` metrics on evaluation steps).
- ``trainer``: the loop (gradient clipping, accumulation, optional bf16 autocast, seeded), and
  ``progress``: a progress bar on a terminal, plain lines otherwise.

A task plugs in like this::

    class MyTask(TrainingTask):
        def __init__(self, model, data):
            self.model, self.data = model, data
        def num_train_examples(self):
            return len(self.data)
        def make_batch(self, indices, keys):
            return collate([self.data[i] for i in indices])      # dict of CPU tensors
        def loss(self, model, batch):
            out = model(**batch)                                 # call the given (maybe DDP) model
            return out.loss, {"accuracy": ...}
        def evaluate(self, model):
            return {"accuracy": ...}
        def save(self, out_dir):
            save_model(self.model, out_dir); save_tokenizer(self.tokenizer, out_dir)

    result = train(MyTask(model, data), TrainConfig.preset("tiny", max_steps=100), "runs/x")
"""

from edgebert.errors import TrainingError  # noqa: F401
from edgebert.training.batches import LengthGroupedBatches, ShuffledBatches  # noqa: F401
from edgebert.training.config import TRAIN_PRESETS, TrainConfig  # noqa: F401
from edgebert.training.distributed import is_main_process  # noqa: F401
from edgebert.training.optim import build_optimizer, build_scheduler, lr_factor  # noqa: F401
from edgebert.training.state import (  # noqa: F401
                    METRICS_FILE,
                    POINTER_FILE,
                    STATE_FILE,
                    TRAIN_CONFIG_FILE,
                    TRAINING_OUTPUTS,
                    check_out_dir,
                    checkpoint_dir,
)
from edgebert.training.task import TrainingTask  # noqa: F401
from edgebert.training.trainer import Trainer, TrainResult, train  # noqa: F401
