"""Layer 2, settings: the model and training configs (frozen dataclasses whose fields carry
their help and bounds), the presets, and reading ``--config`` files.

``attnlab.config.ModelConfig`` and the other names below work as they did when ``config`` was a module."""

from .settings import PRESETS, GPTConfig, ModelConfig, Preset, TrainConfig, get_preset

__all__ = ["PRESETS", "GPTConfig", "ModelConfig", "Preset", "TrainConfig", "get_preset"]
