"""attnlab: pretrain, finetune and probe small character-level transformers."""
