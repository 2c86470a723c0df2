"""Layer 4, looking inside a model: attention maps and loops."""
