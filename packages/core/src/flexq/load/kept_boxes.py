"""Where a kept target's bytes come from: its own logical tensor, or what AOA maps into it.

For :mod:`flexq.load.kept`. Without AOA statements a kept target is one box of the
logical tensor of its own name. With them, the kept target goes through the same
planner as ordinary targets (:func:`flexq.load.pieces.plan_pieces`, Paddle's AOAEngine
over the logical tensors): renames, fuses (``fused_qkv``, ``fused_ffn``, with their
head-group interleave) and ``^T`` give the boxes of the source logical tensors that
land in the target, which are turned into boxes of the sources' kept values. What
cannot stay exact is refused naming the statement: casts, transposes of anything but
an FP8 block weight's last two axes, gpt-oss experts (kept transposed against their
logical layout), and (checked by the caller) a box that cuts a block.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from flexq.errors import TargetError
from flexq.load.kept_chains import leading_to, names
from flexq.load.kept_forms import KeptForm, form_of

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.load.report import LoadOptions
    from flexq.load.targets import Target


@dataclass(frozen=True)
class KeptBox:
    """One source box of a kept target, in kept units (bytes for FP4 values).

    :ivar offset: where the box starts in the source's kept values (source orientation).
    :ivar shape: the box's shape in the source's orientation.
    :ivar at: where it lands in the target's global values (target orientation).
    :ivar transposed: the last two axes swap on the way (``^T`` of an FP8 block weight).
    :ivar statement: the AOA statement that moves it ("" for none).
    """

    form: KeptForm
    offset: tuple[int, ...]
    shape: tuple[int, ...]
    at: tuple[int, ...]
    transposed: bool = False
    statement: str = ""

    @property
    def dst_shape(self) -> tuple[int, ...]:
        """The box's shape in the target's orientation."""
        s = self.shape
        return (*s[:-2], s[-1], s[-2]) if self.transposed else s


def boxes(ct: Composition, key: str, values: Target, options: LoadOptions | None) -> list[KeptBox]:
    """The boxes of kept values that fill ``values`` (this rank's box of target ``key``)."""
    statements = list((options.aoa_config or {}).get("aoa_statements", [])) if options else []
    statements = leading_to(statements, [key])
    if statements and options is not None:
        options = replace(
            options, aoa_config={**(options.aoa_config or {}), "aoa_statements": statements}
        )
    if not statements:
        return [KeptBox(form_of(ct, key), values.offset, values.local_shape, values.offset)]
    from flexq.load.pieces import plan_pieces
    from flexq.load.targets import Target

    # The target in logical elements, for AOA: FP4 values hold two a byte, and gpt-oss
    # experts keyed by their own logical name are kept [..., out, in/2] against their
    # logical [..., in, out].
    f = 2 if values.dtype == "uint8" else 1
    own = _own_form(ct, key)
    gpt_oss = own is not None and own.gpt_oss

    def logical(d: tuple[int, ...]) -> tuple[int, ...]:
        return (*d[:-2], 2 * d[-1], d[-2]) if gpt_oss else _widen(d, f)

    eq = Target(
        key,
        values.tensor,
        logical(values.global_shape),
        logical(values.local_shape),
        logical(values.offset),
        "float32",
    )
    for s in statements:
        if "dtype" in s and key in s:
            raise TargetError(
                f"kept target {key!r}: AOA statement {s!r} casts; a kept form is never cast: "
                "load it dequantized"
            )
    assert options is not None  # statements came from them
    try:
        pieces = plan_pieces(ct, [eq], replace(options, max_inflight_bytes=sys.maxsize))
    except TargetError as exc:
        if f == 1 or gpt_oss:
            raise
        raise TargetError(
            f"{exc} (kept target {key!r}: its uint8 values [..., N, K/2] were read as logical "
            "[..., N, K]; gpt-oss experts are kept as stored ([E, out, in/2]) only under "
            "their own logical name)"
        ) from None
    out = []
    for p in pieces:
        said = _statement(statements, key, p.logical_key)
        where = (
            f"kept target {key!r}: AOA statement {said!r} on {p.logical_key!r}"
            if said
            else f"kept target {key!r} (from {p.logical_key!r})"
        )
        if any("dtype" in s and (key in s or p.logical_key in s) for s in statements):
            raise TargetError(f"{where} casts; a kept form is never cast: load it dequantized")
        try:
            form = form_of(ct, p.logical_key)
        except TargetError as exc:
            raise TargetError(f"{where}: {exc}") from None
        rank = len(p.src_desc.local_shape)
        if form.gpt_oss and not (gpt_oss and p.logical_key == key and p.axes == list(range(rank))):
            raise TargetError(
                f"{where}: gpt-oss experts are kept as stored ([E, out, in/2]), not in their "
                "logical layout; key the QuantizedTarget by their own logical name, which "
                "no statement renames, fuses or transposes"
            )
        if form.gpt_oss:
            src = _stored(tuple(p.src_desc.global_offset), where)
            shape = _stored(tuple(p.src_desc.local_shape), where)
            at = _stored(tuple(p.dst_desc.global_offset), where)
            out.append(KeptBox(form, src, shape, at, False, said))
            continue
        swap = [*range(rank - 2), rank - 1, rank - 2]
        if p.axes not in (list(range(rank)), swap):
            raise TargetError(f"{where}: a kept form only transposes its last two axes")
        transposed = p.axes == swap and rank >= 2
        if transposed and (form.kind != "fp8" or form.per_tensor or form.block[-2] == 1):
            raise TargetError(
                f"{where} transposes a {form.kind} kept form; only an FP8 block weight "
                "transposes exactly (values and scale grid): load it dequantized"
            )
        src = _narrow(tuple(p.src_desc.global_offset), f, where)
        shape = _narrow(tuple(p.src_desc.local_shape), f, where)
        at = _narrow(tuple(p.dst_desc.global_offset), f, where)
        out.append(KeptBox(form, src, shape, at, transposed, said))
    return _joined(out)


def _joined(found: list[KeptBox]) -> list[KeptBox]:
    """``found`` with each run of boxes that continue one another (one source, contiguous
    along one axis both in the source and where they land) as one box: a fuse moves one
    box a head (fused_qkv's ``Q_0, Q_1, ...``), and heads that stay together are checked
    against the block together, as a 128-row block holding two 64-row heads is."""
    out: list[KeptBox] = []
    for box in found:
        axis = _continued(out[-1], box) if out else None
        if axis is None:
            out.append(box)
            continue
        shape = list(out[-1].shape)
        shape[axis] += box.shape[axis]
        out[-1] = replace(out[-1], shape=tuple(shape))
    return out


def _continued(a: KeptBox, b: KeptBox) -> int | None:
    """The one axis along which ``b`` starts where ``a`` ends, in source and target
    (boxes of one source and statement, neither transposed)."""
    if a.transposed or b.transposed or (a.form.key, a.statement) != (b.form.key, b.statement):
        return None
    for d in range(len(a.shape)):
        rest = [e for e in range(len(a.shape)) if e != d]
        if (
            all(a.offset[e] == b.offset[e] and a.at[e] == b.at[e] for e in rest)
            and all(a.shape[e] == b.shape[e] for e in rest)
            and a.offset[d] + a.shape[d] == b.offset[d]
            and a.at[d] + a.shape[d] == b.at[d]
        ):
            return d
    return None


def _own_form(ct: Composition, key: str) -> KeptForm | None:
    """The kept form of the logical tensor named ``key`` (None when there is none)."""
    if key not in ct.entries:
        return None
    try:
        return form_of(ct, key)
    except TargetError:
        return None


def _stored(dims: tuple[int, ...], where: str) -> tuple[int, ...]:
    """gpt-oss logical [..., in, out] dims as kept [..., out, in/2] dims."""
    if dims[-2] % 2:
        raise TargetError(f"{where}: a box boundary falls inside a byte of packed FP4 codes")
    return (*dims[:-2], dims[-1], dims[-2] // 2)


def _widen(dims: tuple[int, ...], f: int) -> tuple[int, ...]:
    return (*dims[:-1], dims[-1] * f) if dims else dims


def _narrow(dims: tuple[int, ...], f: int, where: str) -> tuple[int, ...]:
    if dims and dims[-1] % f:
        raise TargetError(f"{where}: a box boundary falls inside a byte of packed FP4 codes")
    return (*dims[:-1], dims[-1] // f) if dims else dims


def _statement(statements: list[str], key: str, source: str) -> str:
    """The statement that names the source (or the target), for messages; "" when none
    does (the target is its own logical tensor, untouched by the statements)."""

    def naming(name: str) -> str | None:
        for s in statements:
            left, _, right = s.partition("->")
            said = [t.strip().removesuffix("^T") for t in (*left.split(","), *right.split(","))]
            if any(t == name or names(t).fullmatch(name) for t in said):
                return s
        return None

    return naming(source) or naming(key) or ""
