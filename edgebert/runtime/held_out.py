"""The texts and questions ``edgebert check`` measures a bundle on (and the export stores fp32's outputs on):
a ``--data`` file, else the built-in held-out ones; one definition for the check and its fp32 reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgebert.bundle.task_registry import bundle_task
from edgebert.files.textfiles import builtin_texts, iter_texts

__all__ = ["BUILTIN_HELD_OUT", "measured_texts"]

BUILTIN_HELD_OUT = "built-in held-out text"    # how an export's gate records these texts (calibration.TextSource)


def measured_texts(data: Path | None, max_texts: int, task: str) -> tuple[list, dict[str, Any]]:
    """The items to measure (texts, pairs or questions) and where they came from (``source``, ``n``)."""
    if bundle_task(task).inputs == "pairs":         # a reranker: query groups (edgebert.qa.rank_groups)
        from edgebert.qa.rank_groups import BUILTIN_GROUPS, builtin_rank_groups, rank_groups
        from edgebert.qa.squad_file import read_squad

        groups = rank_groups(read_squad(data))[:max_texts] if data is not None else builtin_rank_groups(max_texts)
        return groups, {"source": str(data) if data is not None else BUILTIN_GROUPS, "n": len(groups)}
    if bundle_task(task).inputs == "questions":
        from edgebert.qa.squad_file import builtin_questions, read_squad

        questions = (read_squad(data) if data is not None else builtin_questions())[:max_texts]
        return questions, {"source": str(data) if data is not None else "built-in held-out", "n": len(questions)}
    if data is None:
        texts = builtin_texts("held-out")[:max_texts]
        return texts, {"source": "built-in held-out", "n": len(texts)}
    texts = list(iter_texts(data, max_texts, pairs=True, what="--data file"))
    return texts, {"source": str(data), "n": len(texts)}
