"""The training stages, side by side: ``pretrain``, ``finetune``, ``distill`` and ``evaluate``.

No stage imports another. What they share sits beside them: ``metrics`` (every figure, counted one
way) and ``classification`` (training a classifier with best-checkpoint keeping, for fine-tuning
and task distillation). Below them: ``edgebert.data``, ``edgebert.model`` and the engine,
``edgebert.training``.
"""
