"""Files on disk, torch-free: atomic writes and hashes (``atomic``), the one rule for every output
folder (``outdirs``) and output file (``outfiles``) a command writes, one writer per output
(``locks``), what a failed write says (``failures``: a full disk named, OS errors as one line), the
text readers (``textfiles``: UTF-8, WikiText, CoNLL, streamed texts) and the JSON reader (``jsonfile``)."""
