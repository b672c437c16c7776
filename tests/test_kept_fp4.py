"""Keep-quantized FP4 loads (issue 26): MXFP4 (gpt-oss experts and compressed-tensors) and
NVFP4 (ModelOpt, compressed-tensors) kept forms get the checkpoint's own bytes, exact scales,
and dequantize (numpy reference below) to the dequantized load bit for bit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import paddle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq
from flexq import RawTensor
from flexq.io.checkpoint import Checkpoint
from flexq_mxfp4.encode import CT_MXFP4_CONFIG, save_mxfp4_checkpoint
from flexq_nvfp4.encode import CT_NVFP4_CONFIG, MODELOPT_NVFP4_CONFIG

EXPERTS = "model.layers.0.mlp.experts.gate_up_proj"
LINEAR = "model.layers.0.mlp.down_proj.weight"
NORM = "model.norm.weight"
E, IN, OUT = 2, 64, 48  # gpt-oss logical [E, in, out]; stored blocks [E, out, in/32, 16]


def stored(path: Path, key: str) -> np.ndarray:
    with Checkpoint(path) as ckpt:
        return ckpt.read(key)


def e2m1(packed: np.ndarray) -> np.ndarray:
    """E2M1 codes [..., b] (low nibble first) as float32 [..., 2b]."""
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    out: np.ndarray = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    return out


def mx_reference(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The kept MXFP4 form dequantized: e2m1(values) * 2^(scale - 127), per 32, float32."""
    scale = scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    out: np.ndarray = e2m1(values) * np.repeat(scale, 32, axis=-1)[..., : 2 * values.shape[-1]]
    return out


def nv_reference(
    values: np.ndarray, scales: np.ndarray, glob: np.ndarray, signed_zero: bool = True
) -> np.ndarray:
    """The kept NVFP4 form dequantized: e2m1(values) * (float32(scales) * global_scale).
    ModelOpt's own table decodes code 8 (-0) as +0 (``signed_zero=False``)."""
    s = scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * glob.reshape(())
    elems = e2m1(values) if signed_zero else e2m1(values) + np.float32(0.0)
    out: np.ndarray = elems * np.repeat(s, 16, axis=-1)[..., : 2 * values.shape[-1]]
    return out


def as_bytes(t: Any) -> np.ndarray:
    out: np.ndarray = t.view(paddle.uint8).numpy() if t.dtype != paddle.uint8 else t.numpy()
    return out


def mx_checkpoint(tmp_path: Path, layout: str) -> Path:
    rng = np.random.default_rng(11)
    key, shape = (EXPERTS, (E, IN, OUT)) if layout == "gpt-oss" else (LINEAR, (OUT, IN))
    return save_mxfp4_checkpoint(
        tmp_path / layout,
        {key: rng.standard_normal(shape).astype(np.float32)},
        layout=layout,  # type: ignore[arg-type]
        others={NORM: RawTensor("F32", rng.standard_normal(IN).astype(np.float32))},
    )


def u8(shape: list[int]) -> Any:
    return paddle.zeros(shape, "uint8")


def test_gpt_oss_experts_keep_the_checkpoints_out_major_bytes_and_scales(tmp_path: Path) -> None:
    path = mx_checkpoint(tmp_path, "gpt-oss")
    qt = flexq.QuantizedTarget(u8([E, OUT, IN // 2]), u8([E, OUT, IN // 32]))
    report = flexq.load_state_dict({EXPERTS: qt}, path)
    blocks = stored(path, EXPERTS + "_blocks")
    assert np.array_equal(qt.values.numpy(), blocks.reshape(E, OUT, IN // 2))
    assert np.array_equal(qt.scales.numpy(), stored(path, EXPERTS + "_scales"))
    assert report.bytes_read == E * OUT * (IN // 2 + IN // 32)
    plain = paddle.zeros([E, IN, OUT], "float32")
    flexq.load_state_dict({EXPERTS: plain}, path)
    kept = mx_reference(qt.values.numpy(), qt.scales.numpy()).transpose(0, 2, 1)
    assert np.array_equal(kept.view(np.uint32), plain.numpy().view(np.uint32))


def test_compressed_tensors_mxfp4_keeps_its_bytes_with_float32_scales(tmp_path: Path) -> None:
    path = mx_checkpoint(tmp_path, "compressed-tensors")
    qt = flexq.QuantizedTarget(u8([OUT, IN // 2]), paddle.zeros([OUT, IN // 32]))
    flexq.load_state_dict({LINEAR: qt}, path)
    assert np.array_equal(qt.values.numpy(), stored(path, LINEAR + "_packed"))
    codes = stored(path, LINEAR + "_scale")
    assert np.array_equal(
        qt.scales.numpy(), codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    )
    plain = paddle.zeros([OUT, IN], "float32")
    flexq.load_state_dict({LINEAR: plain}, path)
    kept = mx_reference(qt.values.numpy(), codes)
    assert np.array_equal(kept.view(np.uint32), plain.numpy().view(np.uint32))


@pytest.mark.parametrize(
    ("offset", "local"),
    [
        ((1, 0, 0), (1, OUT, IN // 2)),  # one expert of two: E needs no alignment
        ((0, 5, 0), (2, 7, IN // 2)),  # any rows: the block is 1 along N
        ((0, 0, 16), (2, OUT, 16)),  # the second 32-element block along K
    ],
)
def test_an_mxfp4_shard_gets_its_slice_and_reads_only_its_blocks(
    tmp_path: Path, offset: tuple[int, int, int], local: tuple[int, int, int]
) -> None:
    path = mx_checkpoint(tmp_path, "gpt-oss")
    grid = (*local[:2], local[2] // 16)
    goff = (*offset[:2], offset[2] // 16)
    values, scales = u8(list(local)), u8(list(grid))
    qt = flexq.QuantizedTarget(
        ShardedWeight(EXPERTS, values, local, (E, OUT, IN // 2), offset),
        ShardedWeight(EXPERTS + ".s", scales, grid, (E, OUT, IN // 32), goff),
    )
    report = flexq.load_state_dict({EXPERTS: qt}, path)
    box = tuple(slice(o, o + n) for o, n in zip(offset, local, strict=True))
    sbox = tuple(slice(o, o + n) for o, n in zip(goff, grid, strict=True))
    assert np.array_equal(
        values.numpy(), stored(path, EXPERTS + "_blocks").reshape(E, OUT, -1)[box]
    )
    assert np.array_equal(scales.numpy(), stored(path, EXPERTS + "_scales")[sbox])
    assert report.bytes_read == int(np.prod(local)) + int(np.prod(grid))


def test_an_mxfp4_shard_that_cuts_a_32_element_block_is_refused_before_any_read(
    tmp_path: Path, checkpoint_reads: list[str]
) -> None:
    path = mx_checkpoint(tmp_path, "gpt-oss")
    values = paddle.full([2, OUT, 8], 3, "uint8")
    qt = flexq.QuantizedTarget(
        ShardedWeight(EXPERTS, values, (2, OUT, 8), (E, OUT, IN // 2), (0, 0, 8)),
        u8([2, OUT, 1]),
    )
    with pytest.raises(flexq.TargetError, match=r"offset \[0, 0, 8\].*cuts the checkpoint's block"):
        flexq.load_state_dict({EXPERTS: qt}, path)
    assert checkpoint_reads == []
    assert (values.numpy() == 3).all()


def test_a_nan_e8m0_scale_in_a_kept_shard_is_an_error_before_any_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(2)
    packed = rng.integers(0, 256, (OUT, IN // 2), dtype=np.uint8)
    scales = np.full((OUT, IN // 32), 127, np.uint8)
    scales[3, 1] = 0xFF  # E8M0 NaN
    path = flexq.save_checkpoint(
        tmp_path / "nan",
        {
            LINEAR + "_packed": RawTensor("U8", packed),
            LINEAR + "_scale": RawTensor("U8", scales),
            NORM: RawTensor("F32", np.ones(IN, np.float32)),
        },
        config={"quantization_config": CT_MXFP4_CONFIG},
    )
    monkeypatch.setenv("FLEXQ_NONFINITE_SCALES", "error")
    qt = flexq.QuantizedTarget(paddle.full([OUT, IN // 2], 9, "uint8"), u8([OUT, IN // 32]))
    norm = paddle.full([IN], 5.0)
    with pytest.raises(flexq.FormatError, match=LINEAR.replace(".", r"\.") + r"_scale"):
        flexq.load_state_dict({LINEAR: qt, NORM: norm}, path)
    assert (qt.values.numpy() == 9).all()
    assert (norm.numpy() == 5.0).all()


def nv_checkpoint(tmp_path: Path, producer: str, glob: float) -> Path:
    rng = np.random.default_rng(5)
    packed = rng.integers(0, 256, (OUT, IN // 2), dtype=np.uint8)
    scales = rng.integers(0x08, 0x7E, (OUT, IN // 16), dtype=np.uint8)
    g: tuple[int, ...]
    if producer == "modelopt":
        names, g, qc = (".weight", ".weight_scale", ".weight_scale_2"), (), MODELOPT_NVFP4_CONFIG
    else:
        names, g, qc = (
            (".weight_packed", ".weight_scale", ".weight_global_scale"),
            (1,),
            CT_NVFP4_CONFIG,
        )
    base = LINEAR.removesuffix(".weight")
    return flexq.save_checkpoint(
        tmp_path / producer,
        {
            base + names[0]: RawTensor("U8", packed),
            base + names[1]: RawTensor("F8_E4M3", scales),
            base + names[2]: RawTensor("F32", np.full(g, glob, np.float32)),
        },
        config={"quantization_config": qc},
    )


@pytest.mark.parametrize(
    ("producer", "glob", "kept_glob"),
    [("modelopt", 0.0123, np.float32(0.0123)), ("compressed-tensors", 256.0, np.float32(1 / 256))],
)
def test_nvfp4_keeps_bytes_and_e4m3_scales_with_a_multiplying_global_scale(
    tmp_path: Path, producer: str, glob: float, kept_glob: np.float32
) -> None:
    path = nv_checkpoint(tmp_path, producer, glob)
    qt = flexq.QuantizedTarget(
        u8([OUT, IN // 2]),
        paddle.zeros([OUT, IN // 16], "float32").astype(paddle.float8_e4m3fn),
        global_scale=paddle.zeros([1]),
    )
    flexq.load_state_dict({LINEAR: qt}, path)
    base = LINEAR.removesuffix(".weight")
    packed = ".weight" if producer == "modelopt" else ".weight_packed"
    assert np.array_equal(qt.values.numpy(), stored(path, base + packed))
    assert np.array_equal(as_bytes(qt.scales), stored(path, base + ".weight_scale"))
    assert qt.global_scale.numpy().tolist() == [kept_glob]
    plain = paddle.zeros([OUT, IN], "float32")
    flexq.load_state_dict({LINEAR: plain}, path)
    kept = nv_reference(
        qt.values.numpy(), as_bytes(qt.scales), qt.global_scale.numpy(), producer != "modelopt"
    )
    assert np.array_equal(kept.view(np.uint32), plain.numpy().view(np.uint32))


def test_a_compressed_tensors_global_scale_without_an_exact_reciprocal_is_refused(
    tmp_path: Path,
) -> None:
    path = nv_checkpoint(tmp_path, "compressed-tensors", 3.0)
    qt = flexq.QuantizedTarget(
        paddle.full([OUT, IN // 2], 7, "uint8"),
        paddle.zeros([OUT, IN // 16], "float32"),
        global_scale=paddle.full([1], 2.0),
    )
    with pytest.raises(flexq.TargetError, match=r"divides by its global scale.*not exact"):
        flexq.load_state_dict({LINEAR: qt}, path)
    assert (qt.values.numpy() == 7).all()
    assert qt.global_scale.numpy().tolist() == [2.0]
    bare = flexq.QuantizedTarget(u8([OUT, IN // 2]), paddle.zeros([OUT, IN // 16]))
    with pytest.raises(flexq.TargetError, match=r"needs global_scale, float32 \[1\]"):
        flexq.load_state_dict({LINEAR: bare}, path)


_MX_PATH: dict[str, Path] = {}


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_block_aligned_box_of_a_kept_mxfp4_form_is_the_reference_slice(
    tmp_path: Path, data: st.DataObject
) -> None:
    layout = data.draw(st.sampled_from(["gpt-oss", "compressed-tensors"]))
    if layout not in _MX_PATH:
        _MX_PATH[layout] = mx_checkpoint(tmp_path, layout)
    path = _MX_PATH[layout]
    key, full = (EXPERTS, (E, OUT, IN // 2)) if layout == "gpt-oss" else (LINEAR, (OUT, IN // 2))
    offset, local = [], []
    for d, size in enumerate(full):
        unit = 16 if d == len(full) - 1 else 1
        lo = data.draw(st.integers(0, size // unit - 1)) * unit
        hi = data.draw(st.integers(lo // unit + 1, size // unit)) * unit
        offset.append(lo)
        local.append(hi - lo)
    grid = (*local[:-1], local[-1] // 16)
    goff = (*offset[:-1], offset[-1] // 16)
    values, scales = u8(local), paddle.zeros(list(grid))
    qt = flexq.QuantizedTarget(
        ShardedWeight(key, values, tuple(local), full, tuple(offset)),
        ShardedWeight(key + ".s", scales, grid, (*full[:-1], full[-1] // 16), goff),
    )
    flexq.load_state_dict({key: qt}, path)
    if layout == "gpt-oss":
        whole_v = stored(path, key + "_blocks").reshape(full)
        whole_s = stored(path, key + "_scales")
    else:
        whole_v, whole_s = stored(path, key + "_packed"), stored(path, key + "_scale")
    box = tuple(slice(o, o + n) for o, n in zip(offset, local, strict=True))
    sbox = tuple(slice(o, o + n) for o, n in zip(goff, grid, strict=True))
    assert np.array_equal(values.numpy(), whole_v[box])
    ref = mx_reference(whole_v, whole_s)
    ebox = (*box[:-1], slice(2 * offset[-1], 2 * (offset[-1] + local[-1])))
    got = mx_reference(values.numpy(), whole_s[sbox].astype(np.uint8))
    assert np.array_equal(got, ref[ebox])
    assert np.array_equal(
        scales.numpy(), whole_s[sbox].view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    )


def test_inspect_json_lists_the_kept_forms_of_each_logical_tensor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from flexq.cli.main import main

    path = mx_checkpoint(tmp_path, "gpt-oss")
    assert main(["inspect", str(path), "--json"]) == 0
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)["tensors"]}
    (form,) = rows[EXPERTS]["kept_forms"]
    assert form["form"] == "mxfp4"
    assert form["values"] == {"dtypes": ["uint8"], "shape": [E, OUT, IN // 2]}
    assert form["scales"] == {"dtypes": ["uint8", "float32"], "shape": [E, OUT, IN // 32]}
    assert form["block"] == [1, 16]
    assert form["global_scale"] is None
    assert rows[EXPERTS]["shape"] == [E, IN, OUT]  # the logical layout is unchanged
    assert rows[NORM]["kept_forms"] == []


@pytest.mark.parametrize(("offset", "width"), [(8, 24), (16, 8), (4, 8)])
def test_an_nvfp4_shard_along_k_must_start_on_a_16_element_block(
    tmp_path: Path, offset: int, width: int
) -> None:
    path = nv_checkpoint(tmp_path, "modelopt", 0.5)
    values = paddle.full([OUT, width], 9, "uint8")
    scales = paddle.zeros([OUT, width // 8]).astype(paddle.float8_e4m3fn)
    qt = flexq.QuantizedTarget(
        ShardedWeight(LINEAR, values, (OUT, width), (OUT, IN // 2), (0, offset)),
        ShardedWeight(LINEAR + ".s", scales, (OUT, width // 8), (OUT, IN // 16), (0, offset // 8)),
        global_scale=paddle.zeros([1]),
    )
    if offset % 8:
        with pytest.raises(flexq.TargetError, match=r"offset \[0, 4\].*block \[1, 8\]"):
            flexq.load_state_dict({LINEAR: qt}, path)
        assert (values.numpy() == 9).all()
        return
    report = flexq.load_state_dict({LINEAR: qt}, path)
    base = LINEAR.removesuffix(".weight")
    assert np.array_equal(
        values.numpy(), stored(path, base + ".weight")[:, offset : offset + width]
    )
    sbox = slice(offset // 8, (offset + width) // 8)
    assert np.array_equal(as_bytes(scales), stored(path, base + ".weight_scale")[:, sbox])
    assert report.bytes_read == OUT * width * 9 // 8 + 4
