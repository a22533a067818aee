"""Scores, counted one way everywhere and torch-free: label accuracy / F1 as GLUE reports them
(``labels``) and CoNLL entity scores by seqeval (``entities``)."""
