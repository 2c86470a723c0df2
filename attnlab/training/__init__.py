"""Layer 5, training: the trainer, run directories, metrics sinks, attention-shaping losses and
the pretrain/finetune pipeline."""
