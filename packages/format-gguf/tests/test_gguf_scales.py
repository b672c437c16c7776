"""Non-finite float16 scales inside GGUF blocks: found before the first write of a load,
named (file, GGUF tensor, type, row / block / field), decoded per spec by default, an
error under FLEXQ_NONFINITE_SCALES=error that leaves every target as it was."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import paddle
import pytest

import flexq
from flexq.errors import ScaleWarning
from flexq.formatkit import NONFINITE_SCALES_ENV
from flexq_format_gguf.checkpoint import GGUFCheckpoint
from flexq_format_gguf.ggml import BY_NAME
from flexq_format_gguf.layout import SCALE_FIELDS

Build = Callable[..., Path]
Reference = Callable[[Path], dict[str, np.ndarray]]
#: The last linear of the tiny models (the damaged one: the ones before it load first).
DOWN = "blk.0.ffn_down.weight"
DOWN_HF = "model.layers.0.mlp.down_proj.weight"
#: Every (type, field) pair of the block types.
FIELDS = [(t, i) for t, (_, names) in SCALE_FIELDS.items() for i in range(len(names))]


def damage(path: Path, name: str, row: int, block: int, field: int, value: float) -> None:
    """Set float16 scale ``field`` of block ``block`` of row ``row`` of tensor ``name``."""
    with GGUFCheckpoint([path]) as ckpt:
        assert isinstance(ckpt, GGUFCheckpoint)
        t = ckpt.gguf[name]
    at, _ = SCALE_FIELDS[t.type.name]
    per_row = t.shape[-1] // t.type.block
    where = t.start + (row * per_row + block) * t.type.nbytes + at + 2 * field
    with open(path, "r+b") as fh:
        fh.seek(where)
        fh.write(np.float16(value).tobytes())


def targets_of(path: Path) -> dict[str, paddle.Tensor]:
    rng = np.random.default_rng(3)
    return {
        k: paddle.to_tensor(rng.standard_normal(e.shape).astype(np.float32))
        for k, e in flexq.compose(path).entries.items()
    }


@pytest.mark.parametrize(("type_name", "field"), FIELDS)
def test_a_non_finite_block_scale_fails_before_the_first_write_naming_the_block(
    build: Build, type_name: str, field: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = build("llama", type_name)
    targets = targets_of(path)
    before = {k: v.numpy().copy() for k, v in targets.items()}
    damage(path, DOWN, row=200, block=1, field=field, value=float("inf"))
    monkeypatch.setenv(NONFINITE_SCALES_ENV, "error")
    with pytest.raises(ScaleWarning) as err:
        flexq.load_state_dict(targets, path)
    message = str(err.value)
    names = SCALE_FIELDS[type_name][1]
    for part in ("model.gguf", f"'{DOWN}'", "inf", f"[200, 1, {field}]", type_name, "'gguf'"):
        assert part in message, (part, message)
    assert f"field {'/'.join(names)}" in message
    for key, value in before.items():  # nothing written, the tensors before DOWN included
        np.testing.assert_array_equal(targets[key].numpy(), value, err_msg=key)


@pytest.mark.parametrize("type_name", ["Q4_K", "Q8_0", "Q2_K"])
def test_by_default_the_block_decodes_per_spec_with_one_warning(
    reference: Reference, build: Build, type_name: str
) -> None:
    path = build("llama", type_name)
    damage(path, DOWN, row=3, block=0, field=0, value=float("nan"))
    targets = {DOWN_HF: paddle.zeros([256, 512], "float32")}
    with pytest.warns(ScaleWarning, match=r"nan at \[3, 0, 0\]"):
        flexq.load_state_dict(targets, path)
    got, want = targets[DOWN_HF].numpy(), reference(path)[DOWN]
    np.testing.assert_array_equal(got, want)  # NaN where gguf-py has NaN, bits elsewhere
    block = BY_NAME[type_name].block
    assert np.isnan(got[3, :block]).all()
    assert np.isfinite(np.delete(got, 3, axis=0)).all()
    assert np.isfinite(got[3, block:]).all()


def test_zero_block_scales_are_values_not_warnings(build: Build) -> None:
    path = build("llama", "Q4_K")
    damage(path, DOWN, row=0, block=0, field=0, value=0.0)
    damage(path, DOWN, row=0, block=0, field=1, value=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScaleWarning)
        got = flexq.compose(path).load(DOWN_HF, "float32")
    assert not got[0, :256].any()
