"""Models for the benchmark: a small CNN and ResNets laid out exactly like torchvision's.

`MODELS` lists every model the workload builds: these CNNs (`REGISTRY`) and the
transformer sizes (built by `transformer.build`, which also takes a sequence length).
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
from collections.abc import Callable
from types import ModuleType

from torch import Tensor, nn

from .names import TRANSFORMER_MODELS


class SmallCNN(nn.Module):
    """Five conv-BN-ReLU stages and a linear head: about 1.0 M parameters at 1000 classes."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        widths = (3, 32, 64, 128, 192, 256)
        layers: list[nn.Module] = []
        for i, (cin, cout) in enumerate(itertools.pairwise(widths)):
            stride = 1 if i == 0 else 2
            layers += [
                nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            ]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[-1], num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.pool(self.features(x)).flatten(1))


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions (ResNet-18/34)."""

    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 / 3x3 (strided, as torchvision's "v1.5") / 1x1 convolutions (ResNet-50 and up)."""

    expansion = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet: same module names, so state dicts are interchangeable."""

    def __init__(
        self, block: type[BasicBlock | Bottleneck], layers: list[int], num_classes: int = 1000
    ) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)

    def _make_layer(
        self, block: type[BasicBlock | Bottleneck], planes: int, blocks: int, stride: int = 1
    ) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


_RESNETS: dict[str, tuple[type[BasicBlock | Bottleneck], list[int]]] = {
    "resnet18": (BasicBlock, [2, 2, 2, 2]),
    "resnet50": (Bottleneck, [3, 4, 6, 3]),
    "resnet101": (Bottleneck, [3, 4, 23, 3]),
}


def _resnet(name: str) -> Callable[[int], nn.Module]:
    block, layers = _RESNETS[name]
    return lambda num_classes: ResNet(block, layers, num_classes)


REGISTRY: dict[str, Callable[[int], nn.Module]] = {
    "small_cnn": SmallCNN,
    **{name: _resnet(name) for name in _RESNETS},
}
MODELS: tuple[str, ...] = tuple(REGISTRY) + TRANSFORMER_MODELS


def _torchvision_models() -> ModuleType | None:
    """torchvision.models when it imports cleanly, else None (it is never required)."""
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        return importlib.import_module("torchvision.models")
    except Exception:  # a torchvision built for another torch fails in many ways
        return None


def build_model(name: str, num_classes: int = 1000, prefer_torchvision: bool = True) -> nn.Module:
    """A freshly initialised model; torchvision's own ResNet when torchvision is importable."""
    if name in TRANSFORMER_MODELS:
        raise ValueError(f"{name} is a transformer: build it with transformer.build")
    if name not in REGISTRY:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(MODELS)}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    tv = _torchvision_models() if prefer_torchvision and name in _RESNETS else None
    if tv is not None and hasattr(tv, name):
        return getattr(tv, name)(num_classes=num_classes)
    return REGISTRY[name](num_classes)


def shard_units(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """(parent, name) of the modules that FSDP shards and `--compile` compiles one by one:
    a transformer's blocks, a ResNet's four stages; none for other models."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleDict):
        return [(blocks, key) for key in blocks]
    return [(model, name) for name in ("layer1", "layer2", "layer3", "layer4")
            if isinstance(getattr(model, name, None), nn.Module)]


def num_parameters(model: nn.Module) -> int:
    """Number of parameters (trainable or not) of ``model``."""
    return sum(p.numel() for p in model.parameters())
