"""Helpers for format authors' own tests: run a format's apply the way the core does.

For a format package's test suite: :func:`source_to_paddle` turns the reader's
numpy arrays into the Paddle tensors FlexCheckpoint would deliver (so a test can
check that the numpy and Paddle paths of a decoder give the same bits), and
:func:`decode_box` reads and decodes one box of a logical tensor through the
composed checkpoint, exactly as a load does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.plan import TargetSlice

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flexq.composition import Composition
    from flexq.plan import ReadPlan
    from flexq.transform import ComposedTransform


def source_to_paddle(x: np.ndarray, st_dtype: str) -> Any:
    """A reader array as a Paddle tensor in its transport dtype (BF16 -> bfloat16, F8 -> uint8)."""
    import paddle

    t = paddle.to_tensor(np.require(x, requirements="C"))
    return t.view(paddle.bfloat16) if st_dtype == "BF16" else t


def decode_box(
    ct: Composition | ComposedTransform,
    logical_key: str,
    offset: Sequence[int],
    shape: Sequence[int],
    output_dtype: str = "float32",
    *,
    paddle: bool = False,
) -> Any:
    """The box ``offset`` + ``shape`` of ``logical_key`` decoded through its owner's plan.

    :param paddle: hand the sources to the format as Paddle tensors (the device
        path) instead of numpy arrays (the CPU path).
    :return: numpy (bfloat16 as uint16 bits) for the CPU path, Paddle otherwise.
    """
    entry = ct.entry(logical_key)
    target = TargetSlice(entry.shape, tuple(shape), tuple(offset), output_dtype)
    plan = ct.plan(logical_key, target)
    sources: dict[str, Any] = dict(ct.read_sources(plan))
    if paddle:
        sources = {
            k: source_to_paddle(np.array(v), ct.checkpoint.info(k).dtype)
            for k, v in sources.items()
        }
    ct.check_plan(logical_key, plan, sources)  # the checks a load runs before any write
    return ct.decode(logical_key, sources, plan, output_dtype)


def decode_into_target(
    ct: Composition | ComposedTransform,
    logical_key: str,
    sources: Mapping[str, Any],
    plan: ReadPlan,
) -> np.ndarray:
    """Decode ``plan``'s box as a load into a host target does: into an array standing for
    the target's own memory (its storage dtype: bfloat16 as uint16 bits), with a float32
    scratch array for a target of another dtype. A format may fill the memory itself (a
    float32 target's, or a bfloat16 target's as ``BoxSources.rounded_out``) or leave the
    rounding to the core; either way the result must land in that memory, which is
    returned. Both arrays sit between guard zones as long as themselves: a write outside
    them (a band at a wrong offset, one row too many) fails here, where in a load it
    would land in another tensor's memory or the allocator's."""
    dtype = plan.target.dtype
    shape = tuple(plan.target.local_shape)
    into, into_guards = _guarded(shape, np.dtype(np.uint16 if dtype == "bfloat16" else dtype))
    scratch, scratch_guards = (
        (None, None) if dtype == "float32" else _guarded(shape, np.dtype(np.float32))
    )
    got = ct.decode(logical_key, sources, plan, dtype, out=into, scratch=scratch)
    assert np.shares_memory(got, into) or into.size == 0, "the result is not in the target"
    for guards, name in ((into_guards, "target"), (scratch_guards, "scratch")):
        assert guards is None or not any(np.any(g != _GUARD) for g in guards), (
            f"{logical_key}: a decode wrote outside its {name} memory"
        )
    return into


#: The byte a guard zone holds (:func:`_guarded`).
_GUARD = 0xA5


def _guarded(shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """A zeroed array of ``shape`` inside a buffer with a guard zone of :data:`_GUARD` bytes
    on each side, at least as long as the array (64 elements for a tiny one); the zones as
    byte views."""
    size = int(np.prod(shape))
    pad = max(64, size)
    buffer = np.zeros(size + 2 * pad, dtype)
    data = buffer.view(np.uint8)
    data[: pad * dtype.itemsize] = _GUARD
    data[(pad + size) * dtype.itemsize :] = _GUARD
    head, tail = data[: pad * dtype.itemsize], data[(pad + size) * dtype.itemsize :]
    return buffer[pad : pad + size].reshape(shape), (head, tail)


def check_local_box(
    ct: Composition | ComposedTransform,
    logical_key: str,
    target: TargetSlice,
    whole: np.ndarray,
    read: int,
) -> None:
    """A property test's check of one box: its plan comes from headers and config alone (no
    byte read), is local and for ``target``; its sources take exactly ``read`` bytes (the
    format's own count of the words, blocks and groups that cover the box) and decode to
    the bits of the float32 ``whole`` tensor's slice, rounded once to the target's dtype,
    both as a returned array and into target memory (:func:`decode_into_target`)."""
    before = ct.checkpoint.bytes_read
    plan = ct.plan(logical_key, target)
    assert ct.checkpoint.bytes_read == before, "a plan read tensor bytes"
    assert plan.mode == "local", plan
    assert plan.target == target
    sources = ct.read_sources(plan)
    assert ct.checkpoint.bytes_read - before == read
    _decodes_to_whole(ct, logical_key, target, sources, plan, whole)


def planned_box(
    ct: Composition | ComposedTransform, logical_key: str, target: TargetSlice, whole: np.ndarray
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """A plan test's check: the box ``target`` decodes, through its owner's plan, to the
    bits of the float32 ``whole`` tensor's slice rounded once to the target's dtype (as a
    returned array and into target memory, :func:`decode_into_target`).

    :return: the plan's source slices (source key -> (offset, shape)), for the test to
        compare with the reads it expects.
    """
    plan = ct.plan(logical_key, target)
    _decodes_to_whole(ct, logical_key, target, ct.read_sources(plan), plan, whole)
    return {k: (tuple(o), tuple(sh)) for k, (o, sh) in plan.source_slices.items()}


def _decodes_to_whole(
    ct: Composition | ComposedTransform,
    logical_key: str,
    target: TargetSlice,
    sources: Mapping[str, Any],
    plan: ReadPlan,
    whole: np.ndarray,
) -> None:
    """``plan`` (of ``target``) decodes to the bits of the float32 ``whole`` tensor's slice
    rounded once to the target's dtype, as a returned array and into target memory."""
    from flexq.testing.oracles import round_to, same_bits

    box = tuple(
        slice(o, o + s) for o, s in zip(target.global_offset, target.local_shape, strict=True)
    )
    want = round_to(whole[box], target.dtype)
    same_bits(ct.decode(logical_key, sources, plan, target.dtype), want)
    same_bits(decode_into_target(ct, logical_key, sources, plan), want)


def local_and_whole(
    ct: Composition | ComposedTransform,
    logical_key: str,
    offset: Sequence[int],
    shape: Sequence[int],
) -> tuple[Any, np.ndarray, int, ReadPlan, dict[str, Any]]:
    """A property test's one step: the float32 box ``offset`` + ``shape`` decoded through
    its local plan, the same box sliced from the whole tensor, the bytes the plan's reads
    took, the plan and its sources (to feed them again, e.g. as Paddle tensors).

    :raises AssertionError: when the owner's plan for the box is not local.
    """
    entry = ct.entry(logical_key)
    whole = ct.load(logical_key, "float32")
    plan = ct.plan(logical_key, TargetSlice(entry.shape, tuple(shape), tuple(offset), "float32"))
    assert plan.mode == "local", plan
    before = ct.checkpoint.bytes_read
    sources = ct.read_sources(plan)
    read = ct.checkpoint.bytes_read - before
    local = ct.decode(logical_key, sources, plan, "float32")
    box = tuple(slice(o, o + s) for o, s in zip(offset, shape, strict=True))
    return local, whole[box], read, plan, dict(sources)
