"""The answer formats' names (``ModelConfig.qa_format``) and which of them recall the person's
corpus line first, without importing torch: the configs and the command line's --help read
them here; the formats themselves are in formats.py (tests/test_formats.py keeps the two the same)."""

MASK_CHAR = "\u2047"  # ⁇: the QA sentinel (data/vocab.py's MASK_CHAR, id 1; tests/test_formats.py)
QA_FORMATS = ("direct", "recall")
RECALLING_FORMATS = frozenset({"recall"})  # the formats whose ``recalls`` is true
