"""flexq's composed transform inside Paddle's own ``load_state_dict(..., load_transform=...)``.

Every format that can encode x targets {ShardedWeight, plain, dist} x {float32,
bfloat16} x AOA {none, rename, ``^T``, temporary-variable chain, cast}:

- ``flexq.compose(path)`` handed to Paddle directly (what upstream's users do),
  with what upstream requires of them: ShardedWeight targets for AOA, and a
  ``dtype=`` cast wherever the logical dtype differs from the target's;
- ``flexq.load_state_dict(engine="native")`` and ``engine="auto"``: bit-identical
  to ``engine="direct"`` for every target kind, no casts needed;

and on 2 ranks with ShardedWeight ``Shard(0)`` targets. The checkpoint
directory is never changed. The loader is the real one when this Paddle has
``load_transform``, else the stand-in in :mod:`tests.native.upstream`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
import pytest
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq

from ..conftest import NORM
from ..multirank.launch import launch_two_ranks, rank_arrays
from .conftest import Loader, snapshot, symlink_copy

L0 = "model.layers.0"
Q, K, V = (f"{L0}.self_attn.{p}_proj.weight" for p in "qkv")
GATE, UP, DOWN = (f"{L0}.mlp.{p}_proj.weight" for p in ("gate", "up", "down"))


@dataclass(frozen=True)
class Case:
    """AOA statements (``{c}``: where a cast to the target dtype goes; ``{n}``: the
    norm's cast to float32) and targets: key -> (shape, role). Roles: ``lin`` (a
    quantized linear, in the test's dtype), ``norm`` (the BF16 passthrough norm as
    bfloat16), ``norm32`` (the norm cast to float32)."""

    statements: tuple[str, ...]
    targets: dict[str, tuple[tuple[int, ...], str]]


CASES = {
    "none": Case((), {Q: ((64, 64), "lin"), DOWN: ((64, 96), "lin"), NORM: ((64,), "norm")}),
    "rename": Case(
        (f"{Q} -> attn.q.weight{{c}}", f"{DOWN} -> mlp.down.weight{{c}}", f"{NORM} -> norm.weight"),
        {
            "attn.q.weight": ((64, 64), "lin"),
            "mlp.down.weight": ((64, 96), "lin"),
            "norm.weight": ((64,), "norm"),
        },
    ),
    "transpose": Case(
        (f"{DOWN}^T -> down_t.weight{{c}}", f"{GATE}^T -> gate_t.weight{{c}}"),
        {"down_t.weight": ((96, 64), "lin"), "gate_t.weight": ((64, 96), "lin")},
    ),
    "chain": Case(
        (
            f"{Q}^T -> tq{{c}}",
            f"{K}^T -> tk{{c}}",
            f"{V}^T -> tv{{c}}",
            "tq, tk, tv -> qkv.weight, fused_qkv, num_heads=2, num_key_value_groups=2",
            f"{GATE} -> tg{{c}}",
            "tg^T -> tg2",
            f"{UP}^T -> tu{{c}}",
            "tg2, tu -> gate_up.weight, fused_ffn",
        ),
        {"qkv.weight": ((64, 192), "lin"), "gate_up.weight": ((64, 192), "lin")},
    ),
    "cast": Case(
        (f"{NORM} -> norm.weight{{n}}", f"{Q} -> q.weight{{c}}"),
        {"norm.weight": ((64,), "norm32"), "q.weight": ((64, 64), "lin")},
    ),
}
KINDS = ("sharded", "plain", "dist")
DTYPES = ("float32", "bfloat16")


def statements(case: Case, cast: str | None, norm_cast: bool = True) -> dict[str, Any] | None:
    """The case's AOA config, with ``, dtype='<cast>'`` where it reads a linear (or none)."""
    if not case.statements:
        return None
    c = f", dtype='{cast}'" if cast else ""
    n = ", dtype='float32'" if norm_cast else ""
    return {"aoa_statements": [s.format(c=c, n=n) for s in case.statements]}


def dtype_of(role: str, lin: str) -> str:
    return {"lin": lin, "norm": "bfloat16", "norm32": "float32"}[role]


def make_targets(case: Case, kind: str, lin: str, norm32: str = "float32") -> dict[str, Any]:
    """Fresh targets (filled with 7) of ``kind``; linears in ``lin``."""
    out: dict[str, Any] = {}
    for key, (shape, role) in case.targets.items():
        dtype = norm32 if role == "norm32" else dtype_of(role, lin)
        t = paddle.full(list(shape), 7.0, dtype=dtype)
        if kind == "sharded":
            out[key] = ShardedWeight(key, t, shape, shape, (0,) * len(shape))
        elif kind == "dist":
            out[key] = dist.shard_tensor(
                t, dist.ProcessMesh([0], dim_names=["x"]), [dist.Replicate()]
            )
        else:
            out[key] = t
    return out


def local(value: Any) -> Any:
    t = value.local_tensor if isinstance(value, ShardedWeight) else value
    return t._local_value() if t.is_dist() else t


def bits(sd: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    """Each target's dtype, shape and raw bytes."""
    out = {}
    for key, value in sd.items():
        t = local(value)
        raw = t.view(paddle.int16) if t.dtype == paddle.bfloat16 else t
        out[key] = (str(t.dtype), tuple(t.shape), np.ascontiguousarray(raw.numpy()).tobytes())
    return out


def assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    g, w = bits(got), bits(want)
    assert set(g) == set(w)
    for key in w:
        assert g[key][:2] == w[key][:2], key
        assert g[key][2] == w[key][2], f"{key}: values differ"


def direct(ckpt: Path, name: str, case: Case, kind: str, lin: str, **kw: Any) -> dict[str, Any]:
    sd = make_targets(case, kind, lin, **kw)
    cfg = statements(case, None, norm_cast=kw.get("norm32", "float32") == "float32")
    flexq.load_state_dict(sd, ckpt, aoa_config=cfg, formats=[name], engine="direct")
    return sd


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("lin", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_engine_native_and_auto_match_direct_bit_for_bit(
    paddle_load: Loader, format_ckpt: tuple[str, Path], kind: str, lin: str, case: str
) -> None:
    name, ckpt = format_ckpt
    c = CASES[case]
    want = direct(ckpt, name, c, "plain", lin)
    before = snapshot(ckpt)
    for engine in ("native", "auto"):
        sd = make_targets(c, kind, lin)
        report = flexq.load_state_dict(
            sd, ckpt, aoa_config=statements(c, None), formats=[name], engine=engine
        )
        assert report.engine == "native"
        assert_same(sd, want)
    assert snapshot(ckpt) == before


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("lin", DTYPES)
def test_the_composed_transform_inside_paddle_with_sharded_weight_targets(
    paddle_load: Loader, format_ckpt: tuple[str, Path], tmp_path: Path, lin: str, case: str
) -> None:
    """Upstream hands ``apply`` the logical (natural) dtype; AOA casts it to the target's.
    Without AOA the plan's target dtype is produced, rounded once as a direct load."""
    name, ckpt = format_ckpt
    c = CASES[case]
    ct = flexq.compose(ckpt, [name])
    natural = ct.entry(Q).dtype
    before = snapshot(ckpt)
    sd = make_targets(c, "sharded", lin)
    paddle_load(
        sd,
        str(symlink_copy(ckpt, tmp_path / "view")),
        aoa_config=statements(c, lin if lin != natural else None),
        safetensors=True,
        load_transform=ct,
    )
    if not c.statements:
        want = direct(ckpt, name, c, "plain", lin)
    else:
        # AOA reads the logical tensor in its natural dtype and casts it (Paddle's cast).
        ref = direct(ckpt, name, c, "plain", natural, norm32="bfloat16")
        want = {k: v.astype(dtype_of(c.targets[k][1], lin)) for k, v in ref.items()}
    assert_same(sd, want)
    assert snapshot(ckpt) == before


@pytest.mark.parametrize("lin", DTYPES)
@pytest.mark.parametrize("kind", ["plain", "dist"])
def test_the_composed_transform_inside_paddle_with_plain_and_dist_targets(
    paddle_load: Loader, format_ckpt: tuple[str, Path], tmp_path: Path, kind: str, lin: str
) -> None:
    name, ckpt = format_ckpt
    c = CASES["none"]
    sd = make_targets(c, kind, lin)
    paddle_load(
        sd,
        str(symlink_copy(ckpt, tmp_path / "view")),
        safetensors=True,
        load_transform=flexq.compose(ckpt, [name]),
    )
    assert_same(sd, direct(ckpt, name, c, "plain", lin))


@pytest.mark.parametrize("case", [c for c in CASES if c != "none"])
@pytest.mark.parametrize("kind", ["plain", "dist"])
def test_paddle_ignores_aoa_unless_every_target_is_a_sharded_weight(
    paddle_load: Loader, format_ckpt: tuple[str, Path], tmp_path: Path, kind: str, case: str
) -> None:
    """Upstream's requirement (what engine='native' wraps targets for): the renamed
    targets are looked for as checkpoint tensors and not found."""
    name, ckpt = format_ckpt
    c = CASES[case]
    with pytest.raises(KeyError):
        paddle_load(
            make_targets(c, kind, "float32"),
            str(symlink_copy(ckpt, tmp_path / "view")),
            aoa_config=statements(c, "float32"),
            safetensors=True,
            load_transform=flexq.compose(ckpt, [name]),
        )


def test_paddle_refuses_a_logical_dtype_the_statement_does_not_cast(
    paddle_load: Loader, int8row_ckpt: Path, tmp_path: Path
) -> None:
    """int8row's logical dtype is float32: a bfloat16 target needs ``dtype='bfloat16'``."""
    sd = make_targets(CASES["rename"], "sharded", "bfloat16")
    with pytest.raises(AssertionError, match="different types is prohibited"):
        paddle_load(
            sd,
            str(symlink_copy(int8row_ckpt, tmp_path / "view")),
            aoa_config=statements(CASES["rename"], None),
            safetensors=True,
            load_transform=flexq.compose(int8row_ckpt),
        )


def test_paddles_exceptions_are_flexq_errors_naming_the_tensor_and_restore_targets(
    paddle_load: Loader, int8row_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("device lost")

    sd = make_targets(CASES["rename"], "plain", "float32")
    before = bits(sd)
    monkeypatch.setattr(paddle, "assign", broken)
    with pytest.raises(
        flexq.FlexqError,
        match=r"Paddle's load_transform failed loading logical tensor '[\w.]+': "
        r"RuntimeError: device lost",
    ):
        flexq.load_state_dict(
            sd, int8row_ckpt, aoa_config=statements(CASES["rename"], None), engine="native"
        )
    assert bits(sd) == before


def test_targets_fed_from_one_box_start_load_in_separate_rounds(
    paddle_load: Loader, int8row_ckpt: Path
) -> None:
    """Paddle keys what AOA reads by (logical key, box offset): a rename and a transpose
    of one tensor would overwrite each other there, so they go to separate calls."""
    cfg = {"aoa_statements": [f"{DOWN} -> a", f"{DOWN}^T -> b", f"{Q} -> c"]}
    shapes = {"a": [64, 96], "b": [96, 64], "c": [64, 64]}
    want = {k: paddle.full(s, 7.0) for k, s in shapes.items()}
    flexq.load_state_dict(want, int8row_ckpt, aoa_config=cfg, engine="direct")
    sd = {k: paddle.full(s, 7.0) for k, s in shapes.items()}
    report = flexq.load_state_dict(sd, int8row_ckpt, aoa_config=cfg, engine="native")
    assert report.batches == 2
    assert_same(sd, want)


def test_one_logical_tensor_into_targets_of_two_dtypes_needs_engine_direct(
    paddle_load: Loader, int8row_ckpt: Path
) -> None:
    cfg = {"aoa_statements": [f"{DOWN} -> a", f"{DOWN} -> b"]}
    sd = {"a": paddle.zeros([64, 96]), "b": paddle.zeros([64, 96], dtype="bfloat16")}
    with pytest.raises(flexq.TargetError, match="feeds targets of dtypes float32 and bfloat16"):
        flexq.load_state_dict(sd, int8row_ckpt, aoa_config=cfg, engine="native")
    assert flexq.load_state_dict(sd, int8row_ckpt, aoa_config=cfg, engine="direct").pieces == 2


def test_element_formats_paddles_loader_cannot_carry_load_directly(
    paddle_load: Loader, tmp_path: Path
) -> None:
    import flexq_mxfp4

    w = np.random.default_rng(2).standard_normal((64, 96)).astype(np.float32)
    tensors = flexq_mxfp4.quantize({"m.w": w}, packed_dtype="F4", scale_dtype="F8_E8M0")
    ckpt = flexq.save_checkpoint(tmp_path / "f4", tensors)
    sd = {"m.w": paddle.zeros([64, 96])}
    with pytest.raises(flexq.FlexqError, match="'m.w_blocks' is F4, which Paddle's loader cannot"):
        flexq.load_state_dict(sd, ckpt, engine="native")
    assert flexq.load_state_dict(sd, ckpt).engine == "direct"


HERE = Path(__file__).parent


def launch(tmp_path: Path, worker: str, ckpt: Path, name: str) -> list[dict[str, np.ndarray]]:
    """Run ``worker`` CKPT OUT FORMAT on 2 ranks; each rank's arrays."""
    out = tmp_path / f"out-{worker}"
    out.mkdir()
    launch_two_ranks(HERE / worker, [str(ckpt), str(out), name], tmp_path / f"log-{worker}")
    return rank_arrays(out)


def rank_results(
    tmp_path: Path, worker: str, ckpt: Path, name: str
) -> Iterator[tuple[int, dict[str, np.ndarray], int, str, np.ndarray]]:
    """Run ``worker`` on two ranks; then, for each rank and each quantized linear:
    (rank, its results, the linear's index in key order, its key, its float32 one-process load)."""
    ranks = launch(tmp_path, worker, ckpt, name)
    ct = flexq.compose(ckpt, [name])
    linears = sorted(k for k, e in ct.entries.items() if not e.is_passthrough)
    for r, got in enumerate(ranks):
        for i, key in enumerate(linears):
            yield r, got, i, key, ct.load(key, "float32")


@pytest.mark.multirank
def test_two_ranks_with_sharded_weight_shard0_targets_match_direct(
    tmp_path: Path, format_ckpt: tuple[str, Path]
) -> None:
    """ShardedWeight Shard(0) targets through direct, Paddle's own loader and engine='native'
    (renamed and transposed), and FlexCheckpoint's tuple-keyed multi-shard form (two row
    quarters per rank) through engine='native': each rank's rows of the one-process load."""
    name, ckpt = format_ckpt
    before = snapshot(ckpt)
    for r, got, i, key, full in rank_results(tmp_path, "worker_native.py", ckpt, name):
        rows, cols = full.shape[0] // 2, full.shape[1] // 2
        want = full[r * rows : (r + 1) * rows]
        for mode in ("direct", "raw", "native"):
            np.testing.assert_array_equal(got[f"{mode}.{i}"], want, err_msg=f"{mode} {key}")
        np.testing.assert_array_equal(
            got[f"native.t{i}"], full.T[r * cols : (r + 1) * cols], err_msg=f"^T {key}"
        )
        # Tuple-keyed multi-shard targets: row quarters r and r + 2 on rank r.
        quarter = full.shape[0] // 4
        for q in (r, r + 2):
            np.testing.assert_array_equal(
                got[f"multi.{i}.{q}"], full[q * quarter : (q + 1) * quarter], err_msg=key
            )
    assert snapshot(ckpt) == before


@pytest.mark.multirank
def test_two_ranks_with_dist_tensor_targets_of_every_placement(
    tmp_path: Path, format_ckpt: tuple[str, Path]
) -> None:
    """Shard(0), Shard(1) and Replicate copies of one tensor start at the same offset
    on rank 0, so they load in separate rounds."""
    name, ckpt = format_ckpt
    for r, got, i, key, full in rank_results(tmp_path, "worker_dist.py", ckpt, name):
        rows, cols = full.shape[0] // 2, full.shape[1] // 2
        np.testing.assert_array_equal(got[f"w{i}.r"], full, err_msg=key)
        np.testing.assert_array_equal(got[f"w{i}.s0"], full[r * rows : (r + 1) * rows])
        np.testing.assert_array_equal(got[f"w{i}.s1"], full[:, r * cols : (r + 1) * cols])
