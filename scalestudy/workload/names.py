"""Names the workload accepts, importable without torch (the CLI validates specs with them).

`scalestudy.workload.models.MODELS` must list the same models (a test checks).
"""

MODEL_NAMES: tuple[str, ...] = ("small_cnn", "resnet18", "resnet50", "resnet101")
