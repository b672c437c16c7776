"""flexq.load_state_dict in one process: every target kind, every AOA feature, vs Paddle's own path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
import pytest
from paddle.distributed.flex_checkpoint.dcp.load_state_dict import load_state_dict as paddle_load
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq
from flexq.errors import FlexqError, TargetError
from flexq.formatkit.rounding import float32_to_bfloat16_bits

from .conftest import NORM, dequantized_copy

L0 = "model.layers.0"
AOA = [
    f"{L0}.self_attn.q_proj.weight^T -> tq",
    f"{L0}.self_attn.k_proj.weight^T -> tk",
    f"{L0}.self_attn.v_proj.weight^T -> tv",
    "tq, tk, tv -> layers.0.qkv.weight, fused_qkv, num_heads=2, num_key_value_groups=1",
    f"{L0}.mlp.gate_proj.weight^T -> tg",
    f"{L0}.mlp.up_proj.weight^T -> tu",
    "tg, tu -> layers.0.gate_up.weight, fused_ffn",
    f"{L0}.mlp.down_proj.weight^T -> layers.0.down.weight",
    f"{NORM} -> norm.weight, dtype='float32'",
]
SHAPES = {
    "layers.0.qkv.weight": (64, 192),
    "layers.0.gate_up.weight": (64, 192),
    "layers.0.down.weight": (96, 64),
    "norm.weight": (64,),
}


def targets(kind: str, dtype: str = "float32") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, shape in SHAPES.items():
        t = paddle.full(list(shape), 7.0, dtype=dtype if key != "norm.weight" else "float32")
        if kind == "sharded":
            out[key] = ShardedWeight(key, t, shape, shape, (0,) * len(shape))
        elif kind == "dist":
            mesh = dist.ProcessMesh([0], dim_names=["x"])
            out[key] = dist.shard_tensor(t, mesh, [dist.Replicate()])
        elif kind == "nested":
            head, _, rest = key.partition(".")
            out.setdefault(head, {})[rest] = t
        else:
            out[key] = t
    return out


def values(sd: dict[str, Any]) -> dict[str, np.ndarray]:
    flat = flexq.load.targets.flatten(sd)
    out = {}
    for key, v in flat.items():
        t = v.local_tensor if isinstance(v, ShardedWeight) else v
        t = t._local_value() if t.is_dist() else t
        out[key] = t.astype("float32").numpy()
    return out


def reference(ckpt: Path, tmp_path: Path, formats: list[str] | None) -> dict[str, np.ndarray]:
    """Paddle's own FlexCheckpoint + AOA on the equivalent dequantized checkpoint."""
    plain = dequantized_copy(ckpt, tmp_path / "ref", formats)
    sd = targets("sharded")
    paddle_load(sd, str(plain), safetensors=True, aoa_config={"aoa_statements": AOA})
    return values(sd)


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint"])
@pytest.mark.parametrize("kind", ["plain", "sharded", "nested", "dist"])
def test_aoa_load_matches_paddles_own_path_on_the_dequantized_checkpoint(
    format_ckpt: tuple[str, Path], tmp_path: Path, kind: str, engine: str
) -> None:
    name, ckpt = format_ckpt
    expected = reference(ckpt, tmp_path, [name])
    sd = targets(kind)
    report = flexq.load_state_dict(
        sd,
        ckpt,
        aoa_config={"aoa_statements": AOA},
        engine=engine,  # type: ignore[arg-type]
        formats=[name],
    )
    assert report.engine == engine
    got = values(sd)
    assert set(got) == set(expected)
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key], err_msg=key)


def test_bfloat16_targets_are_rounded_once_from_float32(int8row_ckpt: Path) -> None:
    ct = flexq.compose(int8row_ckpt)
    f32 = ct.load(f"{L0}.mlp.down_proj.weight", "float32")
    bf16 = paddle.zeros([96, 64], dtype="bfloat16")
    flexq.load_state_dict(
        {"down": bf16},
        int8row_ckpt,
        aoa_config={"aoa_statements": [f"{L0}.mlp.down_proj.weight^T -> down"]},
    )
    expected = float32_to_bfloat16_bits(f32.T.copy())
    np.testing.assert_array_equal(bf16.numpy(), expected)


def test_a_wrong_target_shape_leaves_every_target_unchanged(int8row_ckpt: Path) -> None:
    sd = targets("plain")
    sd["layers.0.down.weight"] = paddle.full([64, 96], 7.0)
    before = values(sd)
    with pytest.raises(
        TargetError, match=r"target 'layers.0.down.weight': shape .*\(format int8row\) in "
    ):
        flexq.load_state_dict(sd, int8row_ckpt, aoa_config={"aoa_statements": AOA})
    after = values(sd)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key])


def test_a_key_missing_from_the_checkpoint_is_a_target_error(int8row_ckpt: Path) -> None:
    with pytest.raises(TargetError, match="target 'nope': no tensor of that name"):
        flexq.load_state_dict({"nope": paddle.zeros([2])}, int8row_ckpt)


def test_aoa_statement_naming_an_unknown_key_is_a_target_error(int8row_ckpt: Path) -> None:
    with pytest.raises(TargetError, match="AOA"):
        flexq.load_state_dict(
            {"x": paddle.zeros([2])},
            int8row_ckpt,
            aoa_config={"aoa_statements": ["no.such.tensor -> x"]},
        )


def test_a_bf16_passthrough_tensor_widens_exactly_into_a_float32_target(
    int8row_ckpt: Path,
) -> None:
    target = paddle.zeros([64])
    report = flexq.load_state_dict({NORM: target}, int8row_ckpt)
    bits = flexq.compose(int8row_ckpt).load(NORM, "bfloat16").astype(np.uint32) << 16
    np.testing.assert_array_equal(target.numpy(), bits.view(np.float32))
    assert report.casts == ((NORM, "bfloat16", "float32"),)


def test_an_integer_passthrough_tensor_never_becomes_a_float_target(tmp_path: Path) -> None:
    ckpt = flexq.save_checkpoint(
        tmp_path / "ints", {"ids": flexq.RawTensor.of(np.arange(4, dtype=np.int64))}
    )
    target = paddle.full([4], 7.0)
    with pytest.raises(TargetError, match="would turn integers into floats"):
        flexq.load_state_dict({"ids": target}, ckpt)
    np.testing.assert_array_equal(target.numpy(), np.full(4, 7.0, np.float32))


def load_failing_at_the_fourth_apply(
    sd: dict[str, Any], ckpt: Path, monkeypatch: pytest.MonkeyPatch, *, atomic: bool
) -> None:
    """Load ``sd`` from the int8row ``ckpt`` one row a batch while the plugin's fourth apply
    raises ``RuntimeError("disk on fire")``: the load fails naming the plugin, after
    exactly four applies."""
    calls = {"n": 0}
    # pluggy holds the bound method it calls, so patch the hookimpl itself.
    impl = next(
        i
        for i in flexq.plugin.manager.registry.manager.hook.flexq_apply.get_hookimpls()
        if i.plugin_name == "int8row"
    )
    real = impl.function

    def flaky(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("disk on fire")
        return real(*args)

    monkeypatch.setattr(impl, "function", flaky)
    with pytest.raises(FlexqError, match="int8row.*disk on fire"):
        flexq.load_state_dict(
            sd, ckpt, aoa_config={"aoa_statements": AOA}, max_inflight_bytes=1, atomic=atomic
        )
    assert calls["n"] == 4


def test_atomic_load_restores_earlier_batches_when_a_plugin_fails_in_a_later_one(
    int8row_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sd = targets("plain")
    before = values(sd)
    load_failing_at_the_fourth_apply(sd, int8row_ckpt, monkeypatch, atomic=True)
    after = values(sd)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint"])
def test_loading_never_touches_the_checkpoint_directory(int8row_ckpt: Path, engine: str) -> None:
    def snap() -> dict[str, tuple[int, int]]:
        return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in int8row_ckpt.iterdir()}

    before = snap()
    flexq.load_state_dict(
        targets("plain"),
        int8row_ckpt,
        aoa_config={"aoa_statements": AOA},
        engine=engine,  # type: ignore[arg-type]
    )
    assert snap() == before


def test_unknown_engine_is_an_error(int8row_ckpt: Path) -> None:
    with pytest.raises(FlexqError, match="unknown engine"):
        flexq.load_state_dict({}, int8row_ckpt, engine="warp")  # type: ignore[arg-type]


def test_layer_and_expert_id_macros_expand_over_logical_keys(
    format_ckpt: tuple[str, Path], tmp_path: Path
) -> None:
    name, _ = format_ckpt
    rng = np.random.default_rng(5)
    w = {
        f"model.layers.{i}.mlp.experts.{e}.down_proj.weight": rng.standard_normal((32, 64)).astype(
            np.float32
        )
        for i in range(2)
        for e in range(3)
    }
    ckpt = tmp_path / "moe"
    ckpt.mkdir()
    flexq.plugin.manager.registry.encode(name, ckpt, w, {})
    statements = [
        "model.layers.$LAYER_ID.mlp.experts.$EXPERT_ID.down_proj.weight^T"
        " -> layers.$LAYER_ID.experts.$EXPERT_ID.down.weight"
    ]
    sd = {
        f"layers.{i}.experts.{e}.down.weight": paddle.zeros([64, 32])
        for i in range(2)
        for e in range(3)
    }
    flexq.load_state_dict(sd, ckpt, aoa_config={"aoa_statements": statements}, formats=[name])
    ct = flexq.compose(ckpt, [name])
    for i in range(2):
        for e in range(3):
            want = ct.load(f"model.layers.{i}.mlp.experts.{e}.down_proj.weight", "float32").T
            np.testing.assert_array_equal(sd[f"layers.{i}.experts.{e}.down.weight"].numpy(), want)


def test_non_atomic_loads_keep_no_undo_copies_and_leave_earlier_batches_on_failure(
    int8row_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sd = targets("plain")
    load_failing_at_the_fourth_apply(sd, int8row_ckpt, monkeypatch, atomic=False)
    # targets load in key order, one row per batch here: the first rows of down were
    # written before the fourth apply failed, and nothing after it
    after = values(sd)
    assert not (after["layers.0.down.weight"] == 7.0).all()
    assert (after["layers.0.down.weight"] == 7.0).any()
    assert (after["layers.0.qkv.weight"] == 7.0).all()


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint"])
def test_tensors_split_into_small_batches_load_the_same_bits(
    format_ckpt: tuple[str, Path], engine: str
) -> None:
    name, ckpt = format_ckpt
    whole, parts = targets("plain"), targets("plain")
    options = {"aoa_config": {"aoa_statements": AOA}, "formats": [name], "engine": engine}
    one = flexq.load_state_dict(whole, ckpt, **options)  # type: ignore[arg-type]
    many = flexq.load_state_dict(parts, ckpt, max_inflight_bytes=3000, **options)  # type: ignore[arg-type]
    assert many.pieces > one.pieces
    for key, value in values(whole).items():
        np.testing.assert_array_equal(values(parts)[key], value, err_msg=key)


def test_auto_reads_directly_when_a_component_has_an_element_format_paddle_cannot_carry(
    tmp_path: Path,
) -> None:
    import flexq_mxfp4

    w = np.random.default_rng(2).standard_normal((64, 96)).astype(np.float32)
    tensors = flexq_mxfp4.quantize({"m.w": w}, packed_dtype="F4", scale_dtype="F8_E8M0")
    ckpt = flexq.save_checkpoint(tmp_path / "f4", tensors)
    assert {i.dtype for i in flexq.Checkpoint(ckpt).tensors.values()} == {"F4", "F8_E8M0"}
    sd = {"m.w": paddle.zeros([64, 96])}
    assert flexq.load_state_dict(sd, ckpt).engine == "direct"
    np.testing.assert_array_equal(sd["m.w"].numpy(), flexq.compose(ckpt).load("m.w", "float32"))
    with pytest.raises(FlexqError, match="F4, which FlexCheckpoint cannot transport"):
        flexq.load_state_dict(sd, ckpt, engine="flexcheckpoint")


@pytest.mark.parametrize("max_inflight", [flexq.load.engine.DEFAULT_MAX_INFLIGHT, 3000])
@pytest.mark.parametrize("atomic", [True, False])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_untransposed_targets_get_the_bits_of_a_direct_load(
    format_ckpt: tuple[str, Path], dtype: str, atomic: bool, max_inflight: int
) -> None:
    """Targets that take logical tensors as they are: decoded straight into the
    target (float32) or rounded from one reused float32 buffer straight into it
    (bfloat16 / float16), whole or cut into pieces of several sizes."""
    name, ckpt = format_ckpt
    ct = flexq.compose(ckpt, [name])
    dtypes = {
        key: dtype if not ct.entry(key).is_passthrough else ct.entry(key).dtype
        for key in ct.logical_metadata()
    }
    sd = {key: paddle.full(list(ct.entry(key).shape), 7.0, dtype=d) for key, d in dtypes.items()}
    report = flexq.load_state_dict(
        sd, ckpt, formats=[name], engine="direct", atomic=atomic, max_inflight_bytes=max_inflight
    )
    assert (report.batches > 1) == (max_inflight == 3000)
    for key, d in dtypes.items():
        want = ct.load(key, d)
        got = sd[key].numpy()
        np.testing.assert_array_equal(
            got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8), err_msg=key
        )
