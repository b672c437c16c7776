"""Every decoded Quark scheme equals the numpy oracle bit for bit, whole and box by box."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flexq
from flexq import RawTensor, TargetSlice, compose, composition
from flexq.formatkit import lookup_rounded
from flexq.numerics import rounding
from flexq.testing import decode_box
from flexq.testing.strategies import examples
from flexq_format_quark import decode as quark_decode

KINDS = ["fp8-tensor", "fp8-channel", "int4-group", "uint4-group", "mxfp4"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_each_scheme_loads_as_the_reference_rounded_once(
    oracle: Any,
    write_checkpoint: Any,
    rng: np.random.Generator,
    kind: str,
    dtype: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lin = oracle.Linear(rng, kind, 16, 64)
    ct = compose(write_checkpoint(lin.raw(), oracle.quark_config(oracle.SPECS[kind])), ["quark"])
    assert ct.entries["fc.weight"].owner == "quark"
    assert ct.entries["fc.weight"].shape == (16, 64)
    assert ct.entries["fc.weight"].dtype == "bfloat16"
    oracle.same_bits(ct.load("fc.weight", dtype), oracle.round_to(lin.reference(), dtype))
    # Into a target's memory, as a load decodes (per-tensor FP8 into bfloat16: rounded by
    # the format itself, straight into it).
    calls: list[int] = []
    real = lookup_rounded  # what the decode module imported from the kit

    def spy(table: np.ndarray, codes: np.ndarray, scale: Any, out: np.ndarray) -> np.ndarray:
        calls.append(codes.size)
        return real(table, codes, scale, out)

    monkeypatch.setattr(quark_decode, "lookup_rounded", spy)
    by_core: list[str] = []  # outputs the core rounded (the format did not round itself)
    round_numpy = rounding.round_numpy  # what flexq.composition imported

    def core_spy(x: np.ndarray, out_dtype: str, out: np.ndarray | None = None) -> np.ndarray:
        by_core.append(out_dtype)
        return round_numpy(x, out_dtype, out)

    monkeypatch.setattr(composition, "round_numpy", core_spy)
    plan = ct.plan("fc.weight", TargetSlice.whole((16, 64), dtype))
    into = np.zeros((16, 64), np.uint16 if dtype == "bfloat16" else np.float32)
    work = np.empty((16, 64), np.float32)
    got = ct.decode("fc.weight", ct.read_sources(plan), plan, dtype, out=into, scratch=work)
    assert np.may_share_memory(got, into)
    oracle.same_bits(into, oracle.round_to(lin.reference(), dtype))
    assert calls == ([16 * 64] if (kind, dtype) == ("fp8-tensor", "bfloat16") else [])
    if dtype == "bfloat16":  # every kind but per-channel FP8 rounds into the target itself
        assert by_core == ([] if kind != "fp8-channel" else ["bfloat16"])


@pytest.mark.parametrize("kind", ["int4-group", "uint4-group"])
def test_pack_method_order_keeps_codes_sequential(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator, kind: str
) -> None:
    lin = oracle.Linear(rng, kind, 16, 32, order=list(range(8)))
    config = oracle.quark_config(oracle.SPECS[kind], pack_method="order")
    ct = compose(write_checkpoint(lin.raw(), config), ["quark"])
    oracle.same_bits(ct.load("fc.weight", "float32"), lin.reference())


def test_int4_codes_are_signed_nibbles(oracle: Any, write_checkpoint: Any) -> None:
    # Logical row 0 holds -8..7 in columns 0..15: 0x8 must read -8, 0xF must read -1.
    lin = oracle.Linear(np.random.default_rng(0), "int4-group", 8, 16)
    lin.codes[0] = np.arange(-8, 8)
    lin.scale[:] = 1.0
    ct = compose(
        write_checkpoint(lin.raw(), oracle.quark_config(oracle.SPECS["int4-group"])), ["quark"]
    )
    np.testing.assert_array_equal(
        ct.load("fc.weight", "float32")[0], np.arange(-8, 8, dtype=np.float32)
    )


#: (kind, rows, groups) -> the composed checkpoint and its linear, shared by the examples.
_BUILT: dict[tuple[str, int, int], tuple[Any, Any]] = {}


@examples(20)
@given(
    kind=st.sampled_from(KINDS),
    rows=st.integers(1, 3).map(lambda n: 8 * n),
    groups=st.integers(1, 3),
    data=st.data(),
)
def test_a_local_box_equals_the_slice_of_the_whole_on_numpy_and_paddle(
    oracle: Any, write_checkpoint: Any, kind: str, rows: int, groups: int, data: st.DataObject
) -> None:
    cols = 32 * groups
    if (kind, rows, groups) not in _BUILT:  # one checkpoint per geometry, not per example
        lin = oracle.Linear(np.random.default_rng(rows * 7 + groups), kind, rows, cols)
        config = oracle.quark_config(oracle.SPECS[kind])
        _BUILT[kind, rows, groups] = compose(write_checkpoint(lin.raw(), config), ["quark"]), lin
    ct, lin = _BUILT[kind, rows, groups]
    o0 = data.draw(st.integers(0, rows - 1))
    i0 = data.draw(st.integers(0, cols - 1))
    no = data.draw(st.integers(1, rows - o0))
    ni = data.draw(st.integers(1, cols - i0))
    want = lin.reference()[o0 : o0 + no, i0 : i0 + ni]
    got = decode_box(ct, "fc.weight", (o0, i0), (no, ni))
    oracle.same_bits(np.asarray(got), want)
    on_paddle = decode_box(ct, "fc.weight", (o0, i0), (no, ni), paddle=True)
    oracle.same_bits(np.asarray(on_paddle.numpy()), want)


@pytest.mark.parametrize("kind", ["fp8-channel", "uint4-group", "mxfp4"])
def test_a_local_plan_reads_only_the_covering_words_groups_and_scales(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator, kind: str
) -> None:
    from flexq import TargetSlice

    lin = oracle.Linear(rng, kind, 32, 128)
    ct = compose(write_checkpoint(lin.raw(), oracle.quark_config(oracle.SPECS[kind])), ["quark"])
    plan = ct.plan("fc.weight", TargetSlice((32, 128), (8, 32), (16, 64), "float32"))
    boxes = plan.source_slices
    want = {
        "fp8-channel": {"fc.weight": ((16, 64), (8, 32)), "fc.weight_scale": ((16,), (8,))},
        "uint4-group": {
            "fc.weight": ((64, 2), (32, 1)),
            "fc.weight_zero_point": ((4, 2), (2, 1)),
            "fc.weight_scale": ((4, 16), (2, 8)),
        },
        "mxfp4": {"fc.weight": ((16, 32), (8, 16)), "fc.weight_scale": ((16, 2), (8, 1))},
    }[kind]
    assert {k: (tuple(o), tuple(s)) for k, (o, s) in boxes.items()} == want


def test_components_in_different_shards_decode_the_same(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    lin = oracle.Linear(rng, "uint4-group", 16, 64)
    shards = {"fc.weight": 0, "fc.weight_zero_point": 1, "fc.weight_scale": 2}
    config = oracle.quark_config(oracle.SPECS["uint4-group"])
    ct = compose(write_checkpoint(lin.raw(), config, shard_of=shards), ["quark"])
    assert len({ct.checkpoint.info(k).file for k in shards}) == 3
    oracle.same_bits(ct.load("fc.weight", "float32"), lin.reference())


def test_activation_scales_bias_and_excluded_layers_pass_through(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    lin = oracle.Linear(rng, "fp8-tensor", 16, 32)
    head = rng.standard_normal((8, 32)).astype(np.float32)
    tensors = {
        **lin.raw(),
        "fc.input_scale": oracle.bf16(np.float32(0.5)),
        "fc.bias": RawTensor.of(np.ones(16, np.float32)),
        "lm_head.weight": RawTensor.of(head),
    }
    ct = compose(
        write_checkpoint(tensors, oracle.quark_config(oracle.SPECS["fp8-tensor"])), ["quark"]
    )
    assert set(ct.entries) == {"fc.weight", "fc.input_scale", "fc.bias", "lm_head.weight"}
    for key in ("fc.input_scale", "fc.bias", "lm_head.weight"):
        assert ct.entries[key].is_passthrough
    np.testing.assert_array_equal(ct.load("lm_head.weight", "float32"), head)
    assert float(ct.load("fc.input_scale", "float32")) == 0.5


@pytest.mark.parametrize("kind", ["fp8-tensor", "fp8-channel"])
def test_quark_fp8_weights_are_owned_by_quark_with_every_format_installed(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator, kind: str
) -> None:
    # flexq-format-fp8 claims F8_E4M3 weights of any other config; a Quark config's
    # schemes and excludes are this format's to apply (fp8's DECODED_ELSEWHERE).
    lin = oracle.Linear(rng, kind, 16, 32)
    ct = compose(write_checkpoint(lin.raw(), oracle.quark_config(oracle.SPECS[kind])))
    assert ct.entries["fc.weight"].owner == "quark"
    assert "fp8" in {f.name for f in flexq.list_formats()}
    oracle.same_bits(ct.load("fc.weight", "float32"), lin.reference())


@pytest.mark.parametrize(
    ("kind", "want_bytes"),
    [
        # weight 8x32 F8 + 8 BF16 per-channel scales
        ("fp8-channel", 8 * 32 + 8 * 2),
        # weight rows 64..95 of one word column (4 B each), zeros 2 groups x 1 word, scales 2 x 8 BF16
        ("uint4-group", 32 * 4 + 2 * 4 + 2 * 8 * 2),
        # 8 rows x 16 bytes of codes, 8 rows x 1 E8M0 scale
        ("mxfp4", 8 * 16 + 8),
    ],
)
def test_a_box_reads_only_its_planned_bytes(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator, kind: str, want_bytes: int
) -> None:
    lin = oracle.Linear(rng, kind, 32, 128)
    ct = compose(write_checkpoint(lin.raw(), oracle.quark_config(oracle.SPECS[kind])), ["quark"])
    before = ct.checkpoint.bytes_read
    got = decode_box(ct, "fc.weight", (16, 64), (8, 32))
    assert ct.checkpoint.bytes_read - before == want_bytes
    oracle.same_bits(np.asarray(got), lin.reference()[16:24, 64:96])


def test_whole_mxfp4_rows_decode_band_by_band_as_the_reference(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator, monkeypatch: Any
) -> None:
    # Enough rows for several bands, and the extreme scales the reference shares with
    # flexq: 0x00 (2^-127, subnormal) and 0xFE (products overflow to inf). (0xFF is
    # NaN to flexq, inf to Quark's reference: the ScaleWarning's case.)
    from flexq_format_quark import decode as quark_decode

    lin = oracle.Linear(rng, "mxfp4", 520, 1024)
    lin.exps[:4] = np.array([0, 1, 254, 253], np.uint8)[:, None]
    banded = quark_decode._mxfp4_banded
    calls: list[int] = []

    def counted(*args: Any) -> np.ndarray:
        calls.append(1)
        return banded(*args)

    monkeypatch.setattr(quark_decode, "_mxfp4_banded", counted)
    ct = compose(write_checkpoint(lin.raw(), oracle.quark_config(oracle.SPECS["mxfp4"])), ["quark"])
    with np.errstate(over="ignore", invalid="ignore"):
        want = lin.reference()
    oracle.same_bits(ct.load("fc.weight", "float32"), want)
    assert calls
