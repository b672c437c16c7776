"""Targets as real models hold them (DESIGN invariant 9): trainable parameters in every
float dtype, numpy versions whose DLPack imports are read-only, lazy parameters
without storage, and float passthrough tensors cast to the target's dtype."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import paddle
import pytest

import flexq
from flexq.formatkit.arrays import host_view

if TYPE_CHECKING:
    from pathlib import Path

EXPECTED_A = np.arange(-6, 6, dtype=np.float32).reshape(3, 4) * 0.5
ENGINES = ["direct", "flexcheckpoint"]
FLOATS = ["float32", "bfloat16", "float16"]


def parameter(shape: list[int], dtype: str) -> Any:
    """A trainable parameter (``stop_gradient=False``) filled with 7."""
    p = paddle.create_parameter(
        shape, dtype, default_initializer=paddle.nn.initializer.Constant(7.0)
    )
    assert not p.stop_gradient
    return p


def as_float32(t: Any) -> np.ndarray:
    return np.asarray(t.astype("float32").numpy())


@pytest.fixture
def readonly_dlpack(monkeypatch: pytest.MonkeyPatch) -> None:
    """np.from_dlpack as numpy 1.26 (what paddleformers installs) has it: read-only arrays."""
    real = np.from_dlpack

    def readonly(x: Any) -> np.ndarray:
        out = real(x)
        out.flags.writeable = False
        return out

    monkeypatch.setattr(np, "from_dlpack", readonly)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("numpy_dlpack", ["as installed", "read-only"])
def test_trainable_parameters_load_exactly(
    scaled_ckpt: Path,
    scaled_format: object,
    dtype: str,
    engine: str,
    numpy_dlpack: str,
    request: pytest.FixtureRequest,
) -> None:
    if numpy_dlpack == "read-only":
        request.getfixturevalue("readonly_dlpack")
    a = parameter([3, 4], dtype)
    flexq.load_state_dict({"a": a}, scaled_ckpt, formats=["scaled"], engine=engine)  # type: ignore[arg-type]
    np.testing.assert_array_equal(as_float32(a), EXPECTED_A)
    assert not a.stop_gradient


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_host_view_of_a_parameter_is_writable_and_shares_its_memory(
    dtype: str, readonly_dlpack: None
) -> None:
    p = parameter([2, 3], dtype)
    view = host_view(p)
    assert view is not None
    assert view.flags.writeable
    one = {"bfloat16": np.uint16(0x3F80), "float32": 1.0, "float16": 1.0}[dtype]
    view[1, 2] = one
    assert as_float32(p)[1, 2] == 1.0
    del p  # the view keeps the tensor's memory alive
    got = view.copy()
    assert got[1, 2] == one
    assert got[0, 0] != one


def lazy_parameter(shape: list[int], dtype: str) -> Any:
    """A parameter created as PaddleFormers creates them: under LazyGuard, no storage."""
    with paddle.LazyGuard():
        p = paddle.create_parameter(
            shape, dtype, default_initializer=paddle.nn.initializer.Constant(7.0)
        )
    assert not p._is_initialized()
    return p


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", ["tensor", "sharded"])
def test_lazy_parameters_are_allocated_and_filled(
    scaled_ckpt: Path, scaled_format: object, dtype: str, engine: str, kind: str
) -> None:
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

    a = lazy_parameter([3, 4], dtype)
    target = a if kind == "tensor" else ShardedWeight("a", a, (3, 4), (3, 4), (0, 0))
    flexq.load_state_dict({"a": target}, scaled_ckpt, formats=["scaled"], engine=engine)  # type: ignore[arg-type]
    assert a._is_initialized()
    np.testing.assert_array_equal(as_float32(a), EXPECTED_A)


def test_a_failed_check_leaves_lazy_parameters_without_storage(
    scaled_ckpt: Path, scaled_format: object
) -> None:
    a = lazy_parameter([3, 4], "float32")
    wrong = lazy_parameter([5], "float32")
    with pytest.raises(flexq.TargetError, match="'norm'"):
        flexq.load_state_dict({"a": a, "norm": wrong}, scaled_ckpt, formats=["scaled"])
    assert not a._is_initialized()
    assert not wrong._is_initialized()


def bits_of(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` (float64) rounded once to ``dtype`` (bfloat16 through ml_dtypes)."""
    import ml_dtypes

    np_dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
    with np.errstate(over="ignore"):  # beyond float16: inf, by definition
        return np.asarray(values.astype(np_dtype[dtype]).astype(np.float32))


#: float values whose rounding differs between the dtypes (and exact widening).
PASSTHROUGH = np.array([1.0, -2.0, 1.0 + 2.0**-9, 3.0e-5, 65504.0, 1.0 / 3.0])
SOURCES = {"F32": (np.float32, "float32"), "F16": (np.float16, "float16")}


@pytest.mark.parametrize("st", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("engine", ENGINES)
def test_float_passthrough_is_cast_to_the_target_dtype_rounding_once(
    tmp_path: Path, st: str, dtype: str, engine: str
) -> None:
    if st == "BF16":
        stored = bits_of(PASSTHROUGH, "bfloat16").astype(np.float64)
        raw = flexq.RawTensor(
            "BF16", (stored.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        )
        source_dtype = "bfloat16"
    else:
        np_dtype, source_dtype = SOURCES[st]
        stored = PASSTHROUGH.astype(np_dtype).astype(np.float64)
        raw = flexq.RawTensor.of(PASSTHROUGH.astype(np_dtype))
    path = flexq.save_checkpoint(tmp_path / "c", {"norm": raw})
    target = parameter([PASSTHROUGH.size], dtype)
    want = bits_of(stored, dtype)
    if np.isinf(want).any():
        # bfloat16's 65504 is 65536, beyond float16: an error by default, nothing written.
        before = as_float32(target)
        with pytest.raises(flexq.TargetError, match=r"'norm'.*holds 1 value\(s\) beyond float16"):
            flexq.load_state_dict({"norm": target}, path, engine=engine)  # type: ignore[arg-type]
        np.testing.assert_array_equal(as_float32(target), before)
        return
    report = flexq.load_state_dict({"norm": target}, path, engine=engine)  # type: ignore[arg-type]
    np.testing.assert_array_equal(as_float32(target), want)
    expected = () if source_dtype == dtype else (("norm", source_dtype, dtype),)
    assert report.casts == expected


@pytest.mark.parametrize(
    ("raw", "dtype", "message"),
    [
        (flexq.RawTensor.of(np.arange(3, dtype=np.int8)), "float32", "integers into floats"),
        (flexq.RawTensor.of(np.arange(3, dtype=np.int32)), "bfloat16", "integers into floats"),
        (flexq.RawTensor.of(np.arange(3, dtype=np.float32)), "int32", "into a int32 target"),
    ],
)
def test_casts_that_are_not_one_float_rounding_are_refused_before_any_write(
    tmp_path: Path, raw: flexq.RawTensor, dtype: str, message: str
) -> None:
    path = flexq.save_checkpoint(tmp_path / "c", {"t": raw})
    target = paddle.full([3], 7, dtype=dtype)
    with pytest.raises(flexq.TargetError, match=message):
        flexq.load_state_dict({"t": target}, path)
    np.testing.assert_array_equal(as_float32(target), np.full(3, 7, np.float32))


def shard(key: str, offset: tuple[int, int], rows: int, dtype: str = "float32") -> Any:
    """A ShardedWeight of ``rows`` rows of the [3, 4] tensor ``key`` at ``offset``, filled with 7."""
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

    local = paddle.full([rows, 4], 7.0, dtype=dtype)
    return ShardedWeight(key, local, (rows, 4), (3, 4), offset)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("engine", ENGINES)
def test_tuple_keyed_shards_of_one_tensor_each_get_their_rows(
    scaled_ckpt: Path, scaled_format: object, dtype: str, engine: str
) -> None:
    """FlexCheckpoint's multi-shard form, ``(name, global_offset) -> ShardedWeight``: one
    rank holding rows 0 and 2 of ``a`` (not contiguous) gets each shard's own rows."""
    state = {
        ("a", (2, 0)): shard("a", (2, 0), 1, dtype),
        ("a", (0, 0)): shard("a", (0, 0), 1, dtype),
    }
    report = flexq.load_state_dict(state, scaled_ckpt, formats=["scaled"], engine=engine)  # type: ignore[arg-type]
    assert report.pieces == 2
    for (_, (row, _)), target in state.items():
        np.testing.assert_array_equal(as_float32(target.local_tensor), EXPECTED_A[row : row + 1])


@pytest.mark.parametrize(
    ("state", "message"),
    [
        pytest.param(
            {("a",): "t"},
            r"\('a',\): a tuple key must be FlexCheckpoint's \(name, global_offset\)",
            id="not-a-pair",
        ),
        pytest.param(
            {("a", (0, 0)): "plain"},
            r"holds a EagerParamBase; a \(name, global_offset\) key must hold the ShardedWeight",
            id="plain-tensor",
        ),
        pytest.param(
            {("b", (0, 0)): "a@0"},
            r"\('b', \(0, 0\)\) holds the ShardedWeight of 'a' at offset \(0, 0\); key it \('a', \(0, 0\)\)",
            id="wrong-name",
        ),
        pytest.param(
            {("a", (0, 0)): "a@0x2", ("a", (1, 0)): "a@1"},
            r"target 'a': the shards at offsets \(0, 0\) \(shape \[2, 4\]\) and \(1, 0\) .* overlap",
            id="overlapping",
        ),
        pytest.param(
            {"a": "whole", ("a", (2, 0)): "a@2"}, r"target 'a': the shards .* overlap", id="twice"
        ),
        pytest.param({3: "t"}, r"state_dict key 3 is neither a string nor", id="int-key"),
    ],
)
def test_malformed_tuple_keyed_targets_are_refused_before_any_write(
    scaled_ckpt: Path, scaled_format: object, state: dict[Any, str], message: str
) -> None:
    """Each shard must be keyed by its own name and offset, and no element may belong to two
    shards of one rank: otherwise a TargetError saying which, and every target stays 7."""
    built: dict[Any, Any] = {}
    for key, what in state.items():
        if what == "plain" or what == "whole" or what == "t":
            built[key] = parameter([3, 4], "float32")
        else:
            name, at = what.split("@")
            row, _, rows = at.partition("x")
            built[key] = shard(name, (int(row), 0), int(rows or 1))
    with pytest.raises(flexq.TargetError, match=message):
        flexq.load_state_dict(built, scaled_ckpt, formats=["scaled"], engine="direct")
    for value in built.values():
        tensor = getattr(value, "local_tensor", value)
        assert (as_float32(tensor) == 7).all()
