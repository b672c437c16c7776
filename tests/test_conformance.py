"""The kit's conformance check: every format's read plans declare their scale-like components.

A component a plan reads but does not declare (``ReadPlan.scales`` or
``ReadPlan.checks``) is only looked at while decoding, after other targets were
written; :func:`flexq.formatkit.check_conformance` fails such a format. Every
installed format (and the plugin guide's example) passes it over a checkpoint its
own encoder wrote; NVFP4 as it was before (no scales declared) fails it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import flexq
from flexq import ReadPlan, TargetSlice
from flexq.formatkit import Format, check_conformance, scale_like
from flexq.plugin.manager import registry

from .reliability import surgery


def test_every_format_declares_every_scale_like_component(format_ckpt: tuple[str, Path]) -> None:
    name, path = format_ckpt
    ct = flexq.compose(path)
    check_conformance(ct, [name])
    # Not vacuous: each format's tensors have a scale-like component its plans declare.
    owned = [k for k, e in ct.entries.items() if e.owner == name]
    assert owned
    for key in owned:
        entry = ct.entries[key]
        plan = ct.plan(key, TargetSlice.whole(entry.shape, "float32"))
        like = [s for s in plan.source_slices if scale_like(s, ct.checkpoint.info(s))]
        assert like, key
        assert set(like) <= set(plan.checked), (key, like, plan.checked)


def _rows(shape: tuple[int, int] = (64, 64)) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 0.05


def nvfp4_modelopt(path: Path) -> Path:
    from flexq_nvfp4.encode import quantize

    config = {"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}
    tensors = quantize({"m.fc.weight": _rows()}, layout="modelopt")
    return flexq.save_checkpoint(path, tensors, config=config)


def bnb(mode: str, double_quant: bool) -> Callable[[Path], Path]:
    def build(path: Path) -> Path:
        from flexq_bitsandbytes.encode import quantization_config, quantize

        tensors = quantize({"m.fc.weight": _rows()}, mode=mode, double_quant=double_quant)  # type: ignore[arg-type]
        config = {"quantization_config": quantization_config(mode, double_quant=double_quant)}  # type: ignore[arg-type]
        return flexq.save_checkpoint(path, tensors, config=config)

    return build


def ct_int_asymmetric_act_order(path: Path) -> Path:
    from flexq_ct_int.encode import WeightScheme, checkpoint_config, quantize

    scheme = WeightScheme(group_size=32, symmetric=False)
    g_idx = np.random.default_rng(2).permutation(64) % 2
    tensors = quantize(_rows(), scheme, g_idx=g_idx.astype(np.int32), prefix="m.fc")
    return flexq.save_checkpoint(path, tensors, config=checkpoint_config(scheme))


#: Layouts the encoders of ``format_ckpt`` do not write by default, with their owner.
LAYOUTS: dict[str, tuple[str, Callable[[Path], Path]]] = {
    "nvfp4-modelopt": ("nvfp4", nvfp4_modelopt),
    "bnb-int8": ("bitsandbytes", bnb("int8", False)),
    "bnb-nf4-double-quant": ("bitsandbytes", bnb("nf4", True)),
    "bnb-fp4": ("bitsandbytes", bnb("fp4", False)),
    "ct-int-asymmetric-act-order": ("ct-int", ct_int_asymmetric_act_order),
    "gptq-act-order": ("gptq", surgery.gptq),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_other_layouts_declare_every_scale_like_component(tmp_path: Path, layout: str) -> None:
    owner, write = LAYOUTS[layout]
    ct = flexq.compose(write(tmp_path / layout))
    assert any(e.owner == owner for e in ct.entries.values())
    check_conformance(ct, [owner])


def test_gptq_act_order_plans_declare_g_idx_with_a_check(tmp_path: Path) -> None:
    ct = flexq.compose(surgery.gptq(tmp_path / "ckpt"))
    check_conformance(ct, ["gptq"])
    key = surgery.GPTQ_PREFIX + ".weight"
    plan = ct.plan(key, TargetSlice((64, 64), (32, 64), (32, 0), "float32"))
    assert plan.checks == (surgery.GPTQ_PREFIX + ".g_idx",)
    assert plan.check is not None


def _declaring_nothing(plan: ReadPlan) -> ReadPlan:
    """NVFP4's plan as it was before issue 23: no scales declared, no check."""
    return replace(plan, scales=(), checks=(), check=None)


def _checks_without_check(plan: ReadPlan) -> ReadPlan:
    return replace(plan, scales=(), checks=plan.scales, check=None)


@contextlib.contextmanager
def nvfp4_whose_plans(change: Callable[[ReadPlan], ReadPlan]) -> Iterator[str]:
    """NVFP4 registered a second time, as ``bare-nvfp4``, with ``change`` made to its plans."""
    from flexq_nvfp4.decode import decode
    from flexq_nvfp4.detect import analyze
    from flexq_nvfp4.plan import local_plan

    bare = Format(
        "bare-nvfp4",
        "NVFP4 whose read plans are changed",
        methods=("compressed-tensors/nvfp4-pack-quantized",),
        analyze=analyze,
        plan=lambda t, target: change(local_plan(t, target)),
        decode=decode,
    )
    name = flexq.register_format(bare)
    try:
        yield name
    finally:
        flexq.unregister_format(name)


def nvfp4_checkpoint(path: Path) -> Path:
    path.mkdir()
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    registry.encode("nvfp4", path, {"m.fc.weight": w}, {})
    return path


def test_a_plan_that_omits_its_scales_fails_the_conformance_check(tmp_path: Path) -> None:
    path = nvfp4_checkpoint(tmp_path / "nvfp4")
    check_conformance(flexq.compose(path, ["nvfp4"]))  # the real format passes
    with nvfp4_whose_plans(_declaring_nothing) as bare, pytest.raises(flexq.PluginError) as failed:
        check_conformance(flexq.compose(path, [bare]))
    message = str(failed.value)
    for word in ("'bare-nvfp4'", "'m.fc.weight'", "'m.fc.weight_scale'", "(a scale)"):
        assert word in message, message
    assert "neither ReadPlan.scales nor ReadPlan.checks" in message


def test_checks_without_a_check_to_run_fail_the_conformance_check(tmp_path: Path) -> None:
    path = nvfp4_checkpoint(tmp_path / "nvfp4")
    with (
        nvfp4_whose_plans(_checks_without_check) as bare,
        pytest.raises(flexq.PluginError, match=r"declares checks \[.*\] but no ReadPlan.check"),
    ):
        check_conformance(flexq.compose(path, [bare]))
