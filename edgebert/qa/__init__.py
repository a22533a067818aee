"""Extractive question answering, torch-free (errors, files, numpy and tokenizers only), shared by the
training stages, ``edgebert evaluate`` / ``bench`` and the runtime: ``squad_file`` (SQuAD 1.1 / 2.0
JSON -> ``SquadExample``), ``windows`` (question + context -> overlapping token windows with character
offsets), ``spans`` (start/end logits -> the best span per question and the SQuAD 2.0 null score, as
transformers' ``run_qa`` scores) and ``answers`` (start/end logits -> answers as transformers'
``question-answering`` pipeline gives them, for ``EdgeSession.answer``)."""
