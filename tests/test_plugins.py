"""Plug-in protocol checks: each broken case names the plug-in and the problem."""

import sys
from pathlib import Path

import numpy as np
import pytest

from probe.errors import UserError
from probe.models import registry
from probe.models.plugin import check_model_class, check_model_instance

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "probe_example_plugin"


@pytest.fixture
def plugin_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


def _images(n=8, res=16, channels=1):
    rng = np.random.default_rng(0)
    return (rng.random((n, res, res, channels)) > 0.7).astype(np.uint8) * 255


def test_example_plugin_passes_checks(plugin_path):
    cls = registry.get_model_class("probe_example_plugin.wae:WAEMMD")
    out = check_model_instance(cls, "wae", cls.default_config(), _images(), num_factors=3)
    assert out["code_dim"] == 3 and np.isfinite(out["loss"])


def test_example_plugin_via_entry_point(tmp_path, monkeypatch, plugin_path):
    dist = tmp_path / "probe_example_plugin-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-example-plugin\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[probe.models]\nwae-mmd = probe_example_plugin.wae:WAEMMD\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "wae-mmd" in registry.available_models()
    assert registry.get_model_class("wae-mmd").__name__ == "WAEMMD"


@pytest.mark.parametrize("target, message", [
    ("broken_import:Model", "importing module 'broken_import' failed"),
    ("plugins.broken_plugins:Missing", "has no attribute 'Missing'"),
    ("no_colon_here", "unknown model"),
])
def test_resolution_errors_name_the_plugin(plugin_path, target, message):
    sys.path.insert(0, str(Path(__file__).parent / "plugins"))
    try:
        with pytest.raises(UserError, match=message):
            registry.get_model_class(target)
    finally:
        sys.path.remove(str(Path(__file__).parent / "plugins"))


@pytest.mark.parametrize("cls_name, message", [
    ("NotAModule", "must be a torch.nn.Module"),
    ("NoEncode", "does not implement encode"),
    ("WrongShape", r"encode\(x\) must return a tensor \[B, D\]"),
    ("NaNLoss", "not finite"),
])
def test_broken_plugins_rejected(plugin_path, cls_name, message):
    cls = registry.get_model_class(f"plugins.broken_plugins:{cls_name}")
    label = f"plugins.broken_plugins:{cls_name}"
    with pytest.raises(UserError, match=message) as info:
        config = cls.default_config() if hasattr(cls, "default_config") else {}
        check_model_instance(cls, label, config, _images(), num_factors=3)
    assert label in str(info.value)


def test_check_model_class_accepts_builtin_protocol():
    from probe.models.base import ProbeModel

    with pytest.raises(UserError, match="neither loss"):
        check_model_class(type("Empty", (ProbeModel,), {"encode": lambda self, x: x}), "empty")
