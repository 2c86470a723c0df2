"""Layer 4, answering questions with a model: evaluation and scoring (``evaluate``), the
recall format and stored facts (``knowledge``)."""
