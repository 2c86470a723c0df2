"""Layer 5, where a model keeps a fact: causal tracing (``trace``) and rank-one editing (``edit``)."""
