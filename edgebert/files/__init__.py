"""Files on disk, torch-free: atomic writes and hashes (``atomic``), the one rule for every output
folder and file a command writes (``outdirs``), and the text readers (``textfiles``: UTF-8, WikiText,
CoNLL, streamed texts)."""
