"""Layer 5, answers users can trust: calibration, abstention, the audit and evidence."""
