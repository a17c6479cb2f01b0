"""The benchmark's models: torchvision-exact ResNets and the small CNN."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from torch import nn

from scalestudy.workload.models import MODELS, REGISTRY, build_model, num_parameters

# torchvision's published parameter counts at 1000 classes
TORCHVISION_PARAMS = {"resnet18": 11_689_512, "resnet50": 25_557_032, "resnet101": 44_549_160}


@pytest.mark.parametrize(("name", "params"), sorted(TORCHVISION_PARAMS.items()))
def test_resnet_parameter_counts_match_torchvision(name, params):
    model = build_model(name, 1000, prefer_torchvision=False)
    assert num_parameters(model) == params


def test_resnet50_module_names_match_torchvision_state_dict():
    keys = build_model("resnet50", 10, prefer_torchvision=False).state_dict().keys()
    for key in (
        "conv1.weight",
        "bn1.running_mean",
        "layer1.0.downsample.0.weight",
        "layer1.0.downsample.1.num_batches_tracked",
        "layer3.5.conv3.weight",
        "layer4.2.bn3.bias",
        "fc.weight",
    ):
        assert key in keys
    assert len(keys) == 320  # torchvision resnet50().state_dict() has 320 entries


def test_small_cnn_is_about_a_million_parameters():
    assert 0.8e6 < num_parameters(build_model("small_cnn", 1000)) < 1.3e6


@pytest.mark.parametrize("name", ["small_cnn", "resnet18", "resnet50"])
def test_forward_shape_on_tiny_input(name):
    model = build_model(name, 7, prefer_torchvision=False).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 7)
    assert torch.isfinite(out).all()


def test_backward_reaches_every_parameter():
    model = build_model("resnet18", 5, prefer_torchvision=False)
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_unknown_model_lists_valid_names():
    with pytest.raises(ValueError, match="unknown model 'vgg16'") as err:
        build_model("vgg16", 10)
    for name in MODELS:
        assert name in str(err.value)


def test_bad_class_count():
    with pytest.raises(ValueError, match="num_classes"):
        build_model("small_cnn", 0)


def test_registry_and_names_agree():
    from scalestudy.workload.names import CNN_MODELS, TRANSFORMER_MODELS

    assert tuple(REGISTRY) == CNN_MODELS == ("small_cnn", "resnet18", "resnet50", "resnet101")
    assert MODELS == CNN_MODELS + TRANSFORMER_MODELS


def test_uses_torchvision_when_importable(monkeypatch):
    sentinel = nn.Linear(1, 1)
    fake_models = types.ModuleType("torchvision.models")
    fake_models.resnet18 = lambda num_classes: sentinel  # type: ignore[attr-defined]
    fake = types.ModuleType("torchvision")
    fake.__spec__ = types.SimpleNamespace(name="torchvision")  # type: ignore[assignment]
    fake.models = fake_models  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    monkeypatch.setitem(sys.modules, "torchvision.models", fake_models)
    assert build_model("resnet18", 10) is sentinel
    assert build_model("resnet18", 10, prefer_torchvision=False) is not sentinel
    assert build_model("small_cnn", 10) is not sentinel  # not a torchvision model


def test_broken_torchvision_falls_back(monkeypatch):
    import importlib

    real_import = importlib.import_module

    def failing(name, *args):
        if name.startswith("torchvision"):
            raise RuntimeError("operator torchvision::nms does not exist")
        return real_import(name, *args)

    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())
    monkeypatch.setattr(importlib, "import_module", failing)
    assert num_parameters(build_model("resnet18", 1000)) == TORCHVISION_PARAMS["resnet18"]
