"""flexq.paddleformers against PaddleFormers' own from_pretrained of the dequantized twin.

For every supported class x format (FP8, AWQ, MXFP4) x dtype (bfloat16, float32):
``from_pretrained`` and ``load`` of the quantized twin give every parameter
bit-identical to ``model_class.from_pretrained`` of the twin's ``flexq convert``
output, and the float32 models give identical logits (forwards on CPU).
Run by ``nox -s paddleformers``; skipped where paddleformers is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddleformers")

import paddle

import flexq.paddleformers

from .conftest import CLASSES, FORMATS, Checkpoints, model_class

CASES = [(name, fmt) for name in CLASSES for fmt in FORMATS]
DTYPES = ["bfloat16", "float32"]
#: Ernie-4.5-MoE's MoE layer (MOEAllGatherLayerV2) runs GPU-only kernels
#: (``expand_modality_expert_id``) in eval mode and needs MTP inputs in train mode.
NO_CPU_FORWARD = {"Ernie4_5_MoeForCausalLM"}
#: logits cosine of each twin against the bf16 original (quantization error bound).
MIN_COSINE = {"fp8": 0.98, "awq": 0.95, "mxfp4": 0.9}
TOKENS = np.random.default_rng(0).integers(0, 128, (2, 12))


def parameters(model: Any) -> dict[str, tuple[str, np.ndarray]]:
    """Every parameter's dtype and raw bits."""
    out = {}
    for key, t in model.state_dict().items():
        bits = t.view(paddle.int16) if t.dtype == paddle.bfloat16 else t
        out[key] = (str(t.dtype), np.asarray(bits.numpy()))
    return out


def assert_same_parameters(got: Any, ref: Any) -> None:
    g, r = parameters(got), parameters(ref)
    assert sorted(g) == sorted(r)
    for key in r:
        assert g[key][0] == r[key][0], key
        np.testing.assert_array_equal(g[key][1], r[key][1], err_msg=key)


def reference(checkpoints: Checkpoints, name: str, fmt: str, dtype: str) -> Any:
    """PaddleFormers' own from_pretrained of the dequantized twin."""
    path = checkpoints.dequantized(name, fmt)
    return model_class(name).from_pretrained(str(path), dtype=dtype)


def logits(model: Any, name: str) -> np.ndarray:
    model.config.fuse_rms_norm = False  # the fused kernel is GPU-only
    # gpt-oss's eval-mode MoE is wrong in PaddleFormers 1.2.0; train mode (no dropout
    # in these configs) under no_grad is the path that matches transformers.
    model.train() if name == "GptOssForCausalLM" else model.eval()
    with paddle.no_grad():
        out = model(input_ids=paddle.to_tensor(TOKENS))
    value = out.logits if hasattr(out, "logits") else out[0]
    return np.asarray(value.astype("float32").numpy())


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_from_pretrained_matches_paddleformers_on_the_dequantized_twin(
    checkpoints: Checkpoints, name: str, fmt: str, dtype: str
) -> None:
    ref = reference(checkpoints, name, fmt, dtype)
    got = flexq.paddleformers.from_pretrained(
        model_class(name), checkpoints.twin(name, fmt), dtype=dtype
    )
    assert type(got) is type(ref)
    assert_same_parameters(got, ref)
    assert got.config.dtype == dtype
    assert not got.config.quantization_config.is_weight_quantize()
    if dtype == "float32" and name not in NO_CPU_FORWARD:
        np.testing.assert_array_equal(logits(got, name), logits(ref, name))
        original = model_class(name).from_pretrained(str(checkpoints.bf16(name)), dtype=dtype)
        assert cosine(logits(got, name), logits(original, name)) > MIN_COSINE[fmt]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_load_fills_a_built_model(
    checkpoints: Checkpoints, name: str, fmt: str, dtype: str
) -> None:
    model = model_class(name).from_pretrained(str(checkpoints.bf16(name)), dtype=dtype)
    report = flexq.paddleformers.load(model, checkpoints.twin(name, fmt))
    assert report.pieces > 0
    assert_same_parameters(model, reference(checkpoints, name, fmt, dtype))


@pytest.mark.parametrize("name", CLASSES)
def test_dtype_defaults_to_the_configs(checkpoints: Checkpoints, name: str) -> None:
    twin = checkpoints.twin(name, "fp8")
    assert json.loads((twin / "config.json").read_text())["torch_dtype"] == "bfloat16"
    got = flexq.paddleformers.from_pretrained(model_class(name), twin)
    assert got.config.dtype == "bfloat16"
    assert_same_parameters(got, reference(checkpoints, name, "fp8", "bfloat16"))


@pytest.mark.parametrize("name", CLASSES)
def test_an_auto_class_picks_the_model_class(checkpoints: Checkpoints, name: str) -> None:
    from paddleformers.transformers import AutoModelForCausalLM

    got = flexq.paddleformers.from_pretrained(AutoModelForCausalLM, checkpoints.twin(name, "awq"))
    assert type(got) is model_class(name)
    assert_same_parameters(got, reference(checkpoints, name, "awq", "bfloat16"))


def test_a_given_config_is_used_and_its_quantization_ignored(checkpoints: Checkpoints) -> None:
    name = "LlamaForCausalLM"
    twin = checkpoints.twin(name, "fp8")
    config = model_class(name).config_class.from_pretrained(str(twin))
    got = flexq.paddleformers.from_pretrained(model_class(name), twin, config=config)
    assert got.config is config
    assert not config.quantization_config.is_weight_quantize()
    assert_same_parameters(got, reference(checkpoints, name, "fp8", "bfloat16"))


def test_a_repo_id_in_the_hugging_face_cache(
    checkpoints: Checkpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    name = "LlamaForCausalLM"
    commit = "f" * 40
    tree = tmp_path / "hub" / "models--org--tiny-llama-fp8"
    snap = tree / "snapshots" / commit
    (tree / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (tree / "refs").mkdir()
    (tree / "refs" / "main").write_text(commit)
    for i, f in enumerate(sorted(checkpoints.twin(name, "fp8").iterdir())):
        shutil.copy(f, tree / "blobs" / f"blob{i}")
        (snap / f.name).symlink_to(f"../../blobs/blob{i}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    got = flexq.paddleformers.from_pretrained(model_class(name), "org/tiny-llama-fp8@main")
    assert_same_parameters(got, reference(checkpoints, name, "fp8", "bfloat16"))


def test_paddleformers_alone_refuses_the_quantized_twin(checkpoints: Checkpoints) -> None:
    """Why this module exists: PaddleFormers 1.2.0 cannot read FP8 safetensors itself."""
    twin = checkpoints.twin("LlamaForCausalLM", "fp8")
    assert "quantization_config" in json.loads((twin / "config.json").read_text())
    with pytest.raises(AssertionError, match="F8_E4M3 is not supported"):
        model_class("LlamaForCausalLM").from_pretrained(str(twin))


def test_a_model_without_conversion_rules_is_refused(checkpoints: Checkpoints) -> None:
    with pytest.raises(flexq.FlexqError, match="no _gen_aoa_config"):
        flexq.paddleformers.load(
            paddle.nn.Linear(2, 2), checkpoints.twin("LlamaForCausalLM", "fp8")
        )


def test_the_model_is_built_without_a_random_init(
    checkpoints: Checkpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = model_class("LlamaForCausalLM")
    twin = checkpoints.twin("LlamaForCausalLM", "fp8")  # built (with a random init) first

    def refuse(self: Any, layer: Any) -> None:
        raise AssertionError("random init ran")

    monkeypatch.setattr(cls, "_init_weights", refuse)
    got = flexq.paddleformers.from_pretrained(cls, twin)
    monkeypatch.undo()
    assert_same_parameters(got, reference(checkpoints, "LlamaForCausalLM", "fp8", "bfloat16"))


def test_an_auto_class_picking_a_paddlefleet_model_is_a_clear_error(
    checkpoints: Checkpoints,
) -> None:
    class AutoNeedsFleet:
        @staticmethod
        def _get_model_class_from_config(path: str, config_file: str) -> Any:
            raise ModuleNotFoundError("No module named 'paddlefleet'", name="paddlefleet")

    with pytest.raises(flexq.FlexqError, match="needs paddlefleet.*Deprecated"):
        flexq.paddleformers.from_pretrained(
            AutoNeedsFleet, checkpoints.twin("LlamaForCausalLM", "fp8")
        )
