"""Names the workload accepts, importable without torch (the CLI validates specs with them).

`scalestudy.workload.models.MODELS` must list the same models (a test checks). The
transformer sizes' shapes are here too, so the parallel layout is checked before torch
loads; `scalestudy.workload.transformer` builds the models from them.
"""

CNN_MODELS: tuple[str, ...] = ("small_cnn", "resnet18", "resnet50", "resnet101")

#: Decoder-only transformers: name -> (layers, d_model, heads, vocabulary). The CPU-test
#: sizes have small vocabularies; the GPT ones GPT-2's 50257 tokens padded to 50304.
TRANSFORMER_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "gpt-tiny": (2, 64, 4, 2048),
    "gpt-mini": (4, 128, 4, 4096),
    "gpt-125m": (12, 768, 12, 50304),  # GPT-2 small
    "gpt-350m": (24, 1024, 16, 50304),  # GPT-3 Medium
    "gpt-1.3b": (24, 2048, 16, 50304),  # GPT-3 XL
}
TRANSFORMER_MODELS: tuple[str, ...] = tuple(TRANSFORMER_SHAPES)
MODEL_NAMES: tuple[str, ...] = CNN_MODELS + TRANSFORMER_MODELS


def is_transformer(model: str) -> bool:
    """Whether `model` is one of the transformer sizes."""
    return model in TRANSFORMER_SHAPES
