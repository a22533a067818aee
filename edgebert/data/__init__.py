"""Data: text in, tensors out. ``tokenizer`` (WordPiece), ``corpus`` (text files -> documents),
``mlm`` (documents -> masked sentence-pair batches), ``tasks`` (GLUE TSV / CoNLL files ->
labelled examples) and ``task_data`` (labelled examples, or SQuAD windows from ``edgebert.qa``, ->
padded batches)."""
