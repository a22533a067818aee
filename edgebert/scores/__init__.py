"""Scores, counted one way everywhere and torch-free: label accuracy / F1 as GLUE reports them
(``labels``), CoNLL entity scores by seqeval (``entities``) and SQuAD EM / F1 (the official script's rules), with the
SQuAD 2.0 null threshold (``squad``)."""
