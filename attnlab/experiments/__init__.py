"""Layer 6, experiments: the resumable runner behind demo and compare, training-curve plots and
the table of attention variants."""
