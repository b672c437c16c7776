"""Per-group affine dequantization, ``(q - z) * s``, for integer formats with groups along in.

For format authors whose codes come with one zero point and one scale per group
of ``g`` columns (AutoAWQ, AMD Quark's int4/uint4): written once over
:class:`flexq.formatkit.ArrayOps`, exact in float32 (small-integer codes and
zeros, one product per element), so numpy and Paddle give the same bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flexq.numerics.ops import ArrayOps


def grouped_affine(ops: ArrayOps, q: Any, z: Any, s: Any, g: int, start: int) -> Any:
    """(q - z) * s with z, s [no, ng] given per group of ``g`` columns of q [no, ni].

    :param q: float32 codes, a fresh array (updated in place: numpy skips two
        full-size temporaries; Paddle rebinds, same values).
    :param start: q's first column inside the first group.
    """
    no, ni = q.shape
    ng = z.shape[1]
    if start == 0 and ni == ng * g:
        # Whole groups: broadcast over a group axis instead of repeating z and s.
        q3 = ops.reshape(q, (no, ng, g))
        q3 -= ops.reshape(z, (no, ng, 1))
        q3 *= ops.reshape(s, (no, ng, 1))
        return ops.reshape(q3, (no, ni))
    q -= ops.repeat(z, g, 1)[:, start : start + ni]
    q *= ops.repeat(s, g, 1)[:, start : start + ni]
    return q
