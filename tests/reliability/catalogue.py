"""The reliability catalogue: every bad input and fault, the error it must get, and where.

Each :class:`Case` starts from a small valid checkpoint (``base``), damages it
(``damage``) or the caller's targets (``retarget`` / ``aoa``), and names the
exception type and the words (file, tensor, format, plugin) the message must
contain. tests/test_reliability.py runs every case through the Python API and
the CLI; docs/reliability.md lists the same cases (a test keeps them in step).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import paddle

from flexq.errors import (
    CheckpointError,
    FlexqError,
    FormatError,
    PluginError,
    ScaleWarning,
    TargetError,
)

from . import surgery as s

SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
ONE = "model.safetensors"
A, B = s.FP8_KEYS
X = s.FAULTY_KEYS[0]

Group = Literal["file", "format", "plugin", "target"]
#: "open": found from headers/config before any data is read (inspect finds it too);
#: "data": found while dequantizing (convert finds it); "target": about the caller's targets.
Stage = Literal["open", "data", "target"]


@dataclass(frozen=True)
class Case:
    id: str
    group: Group
    what: str
    base: str
    error: type[FlexqError]
    names: tuple[str, ...]
    damage: Callable[[Path], None] | None = None
    stage: Stage = "open"
    mode: str = ""
    formats: tuple[str, ...] | None = None
    retarget: Callable[[dict[str, Any]], None] | None = None
    aoa: tuple[str, ...] = ()
    #: a warning by default; the case escalates it to an error (warnings filter / PYTHONWARNINGS).
    escalate: bool = False
    extra: dict[str, str] = field(default_factory=dict)
    #: engines the API test also runs (besides the default "auto") where the issue names them.
    engines: tuple[str, ...] = ()
    #: the bad scale is a global one, multiplying (or dividing) every block of ``scaled``.
    scaled: str = ""
    #: found only from the decoded values (float16 overflow): the default load stops before
    #: writing the piece that holds them, an ``atomic`` load (run here) restores every target.
    atomic: bool = False


# -- file damage ---------------------------------------------------------------
def _truncate_data(ckpt: Path) -> None:
    f = ckpt / ONE
    f.write_bytes(f.read_bytes()[:-10])


def _truncate_header(ckpt: Path) -> None:
    f = ckpt / ONE
    blob = f.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    f.write_bytes(blob[: 8 + n // 2])


def _set_length(value: int | None) -> Callable[[Path], None]:
    def damage(ckpt: Path) -> None:
        f = ckpt / ONE
        blob = f.read_bytes()
        n = len(blob) if value is None else value
        f.write_bytes(struct.pack("<Q", n) + blob[8:])

    return damage


def _header_not_json(ckpt: Path) -> None:
    f = ckpt / ONE
    blob = bytearray(f.read_bytes())
    blob[8:20] = b'{"oops": nul'
    f.write_bytes(bytes(blob))


def _header_not_object(ckpt: Path) -> None:
    header, data = s.read_raw(ckpt / ONE)
    raw = json.dumps(list(header)).encode()
    (ckpt / ONE).write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def _offsets_outside(ckpt: Path) -> None:
    begin, end = s.offsets(ckpt, A)
    _, data = s.read_raw(ckpt / ONE)
    shift = len(data) - end + 16
    s.edit_entry(ckpt, A, data_offsets=[begin + shift, end + shift])


def _offsets_overlap(ckpt: Path) -> None:
    begin = s.offsets(ckpt, B)[0]
    s.edit_entry(ckpt, A, data_offsets=[begin, begin + 64 * 64])


def _absurd_shape(ckpt: Path) -> None:
    s.edit_entry(ckpt, A, shape=[2**40, 2**40])


def _empty_file(ckpt: Path) -> None:
    (ckpt / ONE).write_bytes(b"")


def _symlink_outside(ckpt: Path) -> None:
    outside = ckpt.parent / "outside"
    outside.mkdir(exist_ok=True)
    shutil.move(ckpt / SHARD2, outside / SHARD2)
    os.symlink(outside / SHARD2, ckpt / SHARD2)


def _same_tensor_twice(ckpt: Path) -> None:
    # Shard 2 also gets a copy of shard 1's weight `a` (the index still names shard 1).
    import flexq
    from flexq.io.writer import save_file

    with flexq.Checkpoint(ckpt) as c:
        both = {k: flexq.RawTensor(c.info(k).dtype, c.read(k)) for k in c.tensors}
        shard2 = {k: v for k, v in both.items() if c.info(k).file == SHARD2}
    shard2[A] = both[A]
    save_file(shard2, ckpt / SHARD2, None)


def _write(name: str, text: str) -> Callable[[Path], None]:
    def damage(ckpt: Path) -> None:
        (ckpt / name).write_text(text)

    return damage


def _remove(name: str) -> Callable[[Path], None]:
    def damage(ckpt: Path) -> None:
        (ckpt / name).unlink()

    return damage


# -- bounded parsing (issue 23: size, depth, duplicates, value types, loops, surrogates) ---
INDEX = "model.safetensors.index.json"
#: Deeper than any real file and than Python's json can recurse (RecursionError near 1000).
DEEP = 100_000


def _deep(value: str = "0") -> str:
    return "[" * DEEP + value + "]" * DEEP


def _deep_in_header(ckpt: Path) -> None:
    header, data = s.read_raw(ckpt / ONE)
    raw = json.dumps(header)[:-1] + f', "__metadata__": {_deep()}}}'
    blob = raw.encode()
    (ckpt / ONE).write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def _deep_in(name: str) -> Callable[[Path], None]:
    def damage(ckpt: Path) -> None:
        text = (ckpt / name).read_text().rstrip()
        (ckpt / name).write_text(text[:-1] + f', "deep": {_deep()}}}')

    return damage


def _duplicate_header_key(ckpt: Path) -> None:
    # The same tensor name twice, the second entry pointing at B's bytes (shape and
    # dtype made to fit): Python's json would keep it silently.
    header, data = s.read_raw(ckpt / ONE)
    b = json.dumps(header[B])
    raw = json.dumps(header)[:-1] + f", {json.dumps(A)}: {b}}}"
    blob = raw.encode()
    (ckpt / ONE).write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def _duplicate_index_key(ckpt: Path) -> None:
    text = (ckpt / INDEX).read_text().rstrip()
    # A second weight_map entry for B, naming the other shard: which one holds B?
    doc = json.loads(text)
    doc["weight_map"].pop(B)
    head = json.dumps(doc)[:-2]
    (ckpt / INDEX).write_text(f'{head}, "{B}": "{SHARD2}", "{B}": "{SHARD1}"}}}}')


def _index_value_list(ckpt: Path) -> None:
    s.set_index_file(ckpt, B, [SHARD1, SHARD2])


def _sparse(name: str, size: int) -> Callable[[Path], None]:
    def damage(ckpt: Path) -> None:
        # A sparse file: 2 GiB by stat, no disk blocks; reading it whole would take 2 GiB.
        with open(ckpt / name, "r+b") as fh:
            fh.truncate(size)

    return damage


def _symlink_loop(ckpt: Path) -> None:
    (ckpt / SHARD2).unlink()
    os.symlink(SHARD2 + ".loop", ckpt / SHARD2)
    os.symlink(SHARD2, ckpt / (SHARD2 + ".loop"))


def _lone_surrogate_name(ckpt: Path) -> None:
    header, data = s.read_raw(ckpt / ONE)
    raw = json.dumps(header).replace(json.dumps(A), '"model.\\ud800.weight"')
    blob = raw.encode()
    (ckpt / ONE).write_bytes(struct.pack("<Q", len(blob)) + blob + data)


# -- format damage -------------------------------------------------------------
def _call(fn: Callable[..., None], *args: Any, **kwargs: Any) -> Callable[[Path], None]:
    return lambda ckpt: fn(ckpt, *args, **kwargs)


def _fp8_scale(value: float) -> Callable[[Path], None]:
    # The last block scale of the last weight: the load fails after writing `a`.
    return _call(s.set_values, B + "_scale_inv", (2, 1), value)


def _orphan_scale(ckpt: Path) -> None:
    tensors = s.tensors_of(ckpt)
    tensors["model.c.weight_scale_inv"] = tensors[A + "_scale_inv"]
    s.rewrite(ckpt, tensors)


def _wrong_grid(ckpt: Path) -> None:
    s.replace(ckpt, A + "_scale_inv", "F32", np.ones((3, 2), np.float32))


def _qzeros_width(ckpt: Path) -> None:
    s.replace(ckpt, s.AWQ_PREFIX + ".qzeros", "I32", np.zeros((2, 4), np.int32))


def _awq_scale(value: float) -> Callable[[Path], None]:
    return _call(s.set_values, s.AWQ_PREFIX + ".scales", (1, 63), value)


def _mx_scale_nan(ckpt: Path) -> None:
    s.set_values(ckpt, s.MX_KEY + "_scales", (1, 7, 1), 0xFF)


def _config_says_awq(ckpt: Path) -> None:
    s.edit_json(
        ckpt / "config.json",
        quantization_config={"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm"},
    )


def _config_says_hqq(ckpt: Path) -> None:
    s.edit_json(ckpt / "config.json", quantization_config={"quant_method": "hqq", "nbits": 4})


def _stray_packed_weight(ckpt: Path) -> None:
    s.replace(ckpt, "model.q.qweight", "I32", np.zeros((8, 4), np.int32))


# -- target damage -------------------------------------------------------------
def _wrong_shape(targets: dict[str, Any]) -> None:
    targets[B] = paddle.zeros([64, 96], dtype="bfloat16")


def _wrong_dtype(targets: dict[str, Any]) -> None:
    targets[B] = paddle.zeros([96, 64], dtype="int32")


def _untiled_fuse(targets: dict[str, Any]) -> None:
    # One rank's 48 of 128 columns: no even tiling, so the other ranks' boxes are unknown.
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

    t = paddle.zeros([64, 48], dtype="bfloat16")
    targets["model.gu.weight"] = ShardedWeight("model.gu.weight", t, (64, 48), (64, 128), (0, 48))


def _missing_key(targets: dict[str, Any]) -> None:
    targets["model.c.weight"] = paddle.zeros([8, 8], dtype="bfloat16")


def _not_a_tensor(targets: dict[str, Any]) -> None:
    targets[B] = np.zeros((96, 64), np.float32)


#: Each hook and where its failure shows: while composing ("open") or dequantizing ("data").
HOOK_STAGES: list[tuple[str, Stage]] = [
    ("logical_metadata", "open"),
    ("recognized_keys", "open"),
    ("source_keys", "open"),
    ("read_plan", "data"),
    ("apply", "data"),
]
#: Each hook whose result can be of the wrong type, what the faulty plugin returns, and
#: what the error says of it (the format is disabled; asked by name, that is the error).
WRONG_TYPES: list[tuple[str, str, str]] = [
    ("quant_methods", "the int 42", "42 (int), not a collection of names"),
    ("recognized_keys", "the int 42", "42 (int), not a collection of names"),
    ("source_keys", "the int 42", "42 (int)"),
    ("logical_metadata", "a LogicalTensor of shape '8x16'", "shape '8x16' (str)"),
]
F: Group = "file"
FM: Group = "format"
P: Group = "plugin"
T: Group = "target"
CASES: list[Case] = [
    # -- files ----------------------------------------------------------------
    Case("truncated-data", F, "data buffer cut short (partial download)", "fp8",
         CheckpointError, (ONE, B, "outside the data buffer"), _truncate_data),
    Case("truncated-header", F, "file cut inside its JSON header", "fp8",
         CheckpointError, (ONE, "header length", "past the end"), _truncate_header),
    Case("header-length-past-file", F, "header length = file size (runs past the end)", "fp8",
         CheckpointError, (ONE, "past the end"), _set_length(None)),
    Case("header-length-absurd", F, "header length 2^40", "fp8",
         CheckpointError, (ONE, "1099511627776", "exceeds"), _set_length(2**40)),
    Case("header-not-json", F, "header bytes are not JSON", "fp8",
         CheckpointError, (ONE, "not valid JSON"), _header_not_json),
    Case("header-not-object", F, "header is JSON but not an object", "fp8",
         CheckpointError, (ONE, "not a JSON object"), _header_not_object),
    Case("empty-file", F, "zero-byte safetensors file", "fp8",
         CheckpointError, (ONE, "too short"), _empty_file),
    Case("offsets-outside-file", F, "data_offsets beyond the end of the file", "fp8",
         CheckpointError, (ONE, A, "outside the data buffer"), _offsets_outside),
    Case("offsets-overlap", F, "two tensors share bytes", "fp8",
         CheckpointError, (ONE, A, B, "overlap"), _offsets_overlap),
    Case("dtype-shape-vs-bytes", F, "dtype x shape does not match the byte range", "fp8",
         CheckpointError, (ONE, A, "F8_E4M3", "needs 4160 bytes"),
         _call(s.edit_entry, A, shape=[64, 65])),
    Case("absurd-shape", F, "shape [2^40, 2^40] (allocation bomb)", "fp8",
         CheckpointError, (ONE, A, "1099511627776"), _absurd_shape),
    Case("unknown-dtype", F, "dtype string F8_E4M3FN (not a safetensors name)", "fp8",
         CheckpointError, (ONE, A, "F8_E4M3FN"), _call(s.edit_entry, A, dtype="F8_E4M3FN")),
    Case("missing-shard", F, "a shard named in index.json is missing", "fp8-sharded",
         CheckpointError, (SHARD2, "missing"), _remove(SHARD2)),
    Case("index-dotdot", F, "index.json names ../file", "fp8-sharded",
         CheckpointError, ("../" + SHARD2, "not a plain file name"),
         _call(s.set_index_file, B, "../" + SHARD2)),
    Case("index-absolute", F, "index.json names an absolute path", "fp8-sharded",
         CheckpointError, ("/etc/passwd", "not a plain file name"),
         _call(s.set_index_file, B, "/etc/passwd")),
    Case("symlink-outside", F, "a shard is a symlink to a file outside the directory", "fp8-sharded",
         CheckpointError, (SHARD2, "outside the checkpoint directory"), _symlink_outside),
    Case("same-tensor-two-shards", F, "one tensor in two shards", "fp8-sharded",
         CheckpointError, (A, SHARD1, SHARD2), _same_tensor_twice),
    Case("index-names-absent-tensor", F, "index.json puts a tensor in a shard without it", "fp8-sharded",
         CheckpointError, (s.NORM, SHARD1, "no such tensor"),
         _call(s.set_index_file, s.NORM, SHARD1)),
    Case("index-not-json", F, "index.json is not JSON", "fp8-sharded",
         CheckpointError, ("model.safetensors.index.json", "weight_map"),
         _write("model.safetensors.index.json", '{"weight_map": {')),
    Case("config-not-json", F, "config.json is not JSON", "fp8",
         CheckpointError, ("config.json", "not valid JSON"), _write("config.json", '{"torch_dtype": ')),
    # -- formats --------------------------------------------------------------
    Case("fp8-weight-without-scale", FM, "F8_E4M3 weight without its scale", "fp8",
         FormatError, (ONE, A, "no scale", "format fp8"), _call(s.drop, A + "_scale_inv")),
    Case("fp8-scale-without-weight", FM, "weight_scale_inv with no weight (orphan)", "fp8",
         FormatError, (ONE, "model.c.weight_scale_inv", "'fp8'", "orphaned"), _orphan_scale),
    Case("fp8-scale-grid-wrong-shape", FM, "block scale grid (3, 2) for a (64, 64) weight", "fp8",
         FormatError, (ONE, A + "_scale_inv", "format fp8"), _wrong_grid),
    Case("awq-bits-8", FM, "AWQ config with bits 8", "int4-awq",
         FormatError, ("config.json", "8-bit", "int4-awq"), _call(s.edit_quant_config, bits=8)),
    Case("awq-qzeros-width", FM, "qzeros width does not match qweight", "int4-awq",
         FormatError, (ONE, s.AWQ_PREFIX + ".qzeros", "int4-awq"), _qzeros_width),
    Case("mxfp4-blocks-without-scales", FM, "gpt-oss *_blocks without *_scales", "mxfp4",
         FormatError, (ONE, s.MX_KEY + "_blocks", "mxfp4"), _call(s.drop, s.MX_KEY + "_scales")),
    Case("config-names-other-format", FM, "config.json says awq, tensors are FP8", "fp8",
         FormatError, ("config.json", "awq", "F8_E4M3"), _config_says_awq),
    Case("config-names-unclaimed-method", FM, "config.json names a method no format decodes",
         "fp8", FormatError, ("config.json", "'hqq'", "no format"), _config_says_hqq),
    Case("config-method-format-not-asked", FM, "config says awq; only fp8 asked (disabled)",
         "fp8", FormatError, ("config.json", "'awq'", "int4-awq"), _config_says_awq,
         formats=("fp8",)),
    Case("tensor-looks-quantized-unclaimed", FM, "an I32 qweight no format claims", "fp8",
         FormatError, ("model.q.qweight", "looks quantized", "allow_unclaimed"),
         _stray_packed_weight),
    Case("fp8-scale-nan", FM, "FP8 block scale is NaN", "fp8",
         ScaleWarning, (ONE, B + "_scale_inv", "nan", "[2, 1]", "'fp8'"), _fp8_scale(float("nan")),
         stage="data", escalate=True),
    Case("fp8-scale-inf", FM, "FP8 block scale is +inf", "fp8",
         ScaleWarning, (ONE, B + "_scale_inv", "inf", "'fp8'"), _fp8_scale(float("inf")),
         stage="data", escalate=True),
    Case("mxfp4-scale-0xff", FM, "MXFP4 E8M0 scale 0xFF (NaN)", "mxfp4",
         ScaleWarning, (ONE, s.MX_KEY + "_scales", "nan", "[1, 7, 1]", "'mxfp4'"), _mx_scale_nan,
         stage="data", escalate=True),
    Case("awq-scale-nan", FM, "AWQ F16 scale is NaN", "int4-awq",
         ScaleWarning, (ONE, s.AWQ_PREFIX + ".scales", "nan", "[1, 63]", "'int4-awq'"),
         _awq_scale(float("nan")), stage="data", escalate=True),
    Case("awq-scale-inf", FM, "AWQ F16 scale is -inf", "int4-awq",
         ScaleWarning, (ONE, s.AWQ_PREFIX + ".scales", "-inf", "'int4-awq'"),
         _awq_scale(float("-inf")), stage="data", escalate=True),
    Case("two-formats-claim-one-tensor", FM, "a plugin also claims fp8's weights", "fp8-faulty",
         PluginError, (A, "'faulty'", "'fp8'"), mode="claim-other"),
    # -- plugins --------------------------------------------------------------
    *[
        Case(f"plugin-raises-in-{hook}", P, f"flexq_{hook} raises RuntimeError", "faulty",
             PluginError, ("'faulty'", f"flexq_{hook}", "exploded"),
             mode=f"raise:{hook}", stage=stage)
        for hook, stage in HOOK_STAGES
    ],
    Case("plugin-wrong-shape", P, "apply returns a [1, 1] array", "faulty",
         PluginError, ("'faulty'", X, "shape (1, 1)"), mode="wrong-shape", stage="data"),
    Case("plugin-wrong-dtype", P, "apply returns the undecoded int8 codes", "faulty",
         PluginError, ("'faulty'", X, "dtype int8"), mode="wrong-dtype", stage="data"),
    Case("plugin-returns-none", P, "apply returns None", "faulty",
         PluginError, ("'faulty'", X, "NoneType"), mode="none", stage="data"),
    Case("plugin-no-source-keys", P, "source_keys returns None", "faulty",
         PluginError, ("'faulty'", X, "no source keys"), mode="no-sources"),
    Case("plugin-claims-missing-tensor", P, "a logical tensor needs a tensor not in the file",
         "faulty", PluginError, ("'faulty'", X, "model.x.fz"), mode="ghost"),
    Case("plugin-plan-outside-source", P, "read plan box past the end of a source", "faulty",
         PluginError, ("'faulty'", X, "outside its shape"), mode="bad-plan", stage="data"),
    Case("plugin-broken-entry-point", P, "entry point cannot be imported, format asked by name",
         "fp8", PluginError, ("'broken'", "flexq-format-broken", "flexq_no_such_module"),
         formats=("broken",)),
    # -- bounded parsing (issue 23) ---------------------------------------------
    Case("header-nested-deep", F, "header JSON nested 100,000 deep", "fp8",
         CheckpointError, (ONE, "header", "nested 100001 levels deep"), _deep_in_header),
    Case("index-nested-deep", F, "index.json nested 100,000 deep", "fp8-sharded",
         CheckpointError, (INDEX, "nested 100001 levels deep"), _deep_in(INDEX)),
    Case("config-nested-deep", F, "config.json nested 100,000 deep", "fp8",
         CheckpointError, ("config.json", "nested 100001 levels deep"), _deep_in("config.json")),
    Case("config-too-big", F, "config.json of 2 GiB (refused by its size, not read)", "fp8",
         CheckpointError, ("config.json", "2147483648 bytes"), _sparse("config.json", 2**31)),
    Case("index-too-big", F, "index.json of 2 GiB (refused by its size, not read)", "fp8-sharded",
         CheckpointError, (INDEX, "2147483648 bytes"), _sparse(INDEX, 2**31)),
    Case("header-duplicate-key", F, "one tensor name twice in a header", "fp8",
         CheckpointError, (ONE, "duplicate key", A), _duplicate_header_key),
    Case("index-duplicate-key", F, "one tensor twice in index weight_map", "fp8-sharded",
         CheckpointError, (INDEX, "duplicate key", B), _duplicate_index_key),
    Case("index-value-list", F, "an index weight_map value that is a list", "fp8-sharded",
         CheckpointError, (INDEX, B, "not in one file name"), _index_value_list),
    Case("symlink-loop", F, "a shard is a symlink loop", "fp8-sharded",
         CheckpointError, (SHARD2, "cannot be resolved"), _symlink_loop),
    Case("tensor-name-lone-surrogate", F, "a tensor name with a lone surrogate (\\ud800)", "fp8",
         CheckpointError, (ONE, "lone surrogate", "not text"), _lone_surrogate_name),
    *[
        Case(f"plugin-wrong-type-{hook}", P, f"flexq_{hook} returns {what}", "faulty",
             PluginError, ("'faulty'", f"flexq_{hook}", detail, "disabled"),
             mode=f"wrong-type:{hook}", formats=("faulty",))
        for hook, what, detail in WRONG_TYPES
    ],
    # -- targets --------------------------------------------------------------
    Case("target-wrong-shape", T, "target [64, 96] for a [96, 64] weight", "fp8",
         TargetError, (B, "[64, 96]"), stage="target", retarget=_wrong_shape),
    Case("target-wrong-dtype", T, "int32 target for an FP8 weight", "fp8",
         TargetError, (B, "int32"), stage="target", retarget=_wrong_dtype),
    Case("target-key-missing", T, "target key not in the checkpoint", "fp8",
         TargetError, ("model.c.weight", "no tensor"), stage="target", retarget=_missing_key),
    Case("target-not-a-tensor", T, "target is a numpy array", "fp8",
         TargetError, (B, "ndarray"), stage="target", retarget=_not_a_tensor),
    Case("aoa-unknown-key", T, "AOA statement names a key the checkpoint lacks", "fp8",
         TargetError, ("model.z.weight",), stage="target",
         aoa=("model.z.weight -> model.a.weight",)),
    Case("aoa-macro-expands-to-nothing", T, "a misspelled $LAYER_ID statement", "fp8",
         TargetError, ("model.layer.$LAYER_ID.weight", "expands to nothing"), stage="target",
         aoa=("model.layer.$LAYER_ID.weight -> x.$LAYER_ID.weight",)),
    Case("aoa-fuse-over-untiled-shard", T, "fused_ffn into a shard that does not tile its tensor",
         "fp8", TargetError, ("model.gu.weight", "does not tile"), stage="target",
         retarget=_untiled_fuse, aoa=("model.a.weight, model.a.weight -> model.gu.weight, fused_ffn",)),
]  # fmt: skip

# -- issue 23: every check metadata and scales allow runs before the first write ----
NV_B = s.NV_KEYS[1]
GPTQ_V = s.GPTQ_PREFIXES[1]
BOTH_ENGINES = ("direct", "flexcheckpoint")
TWICE = ("model.a.weight -> model.b.weight", "model.b.weight -> model.b.weight")


def _float16_targets(targets: dict[str, Any]) -> None:
    for key, t in targets.items():
        targets[key] = t.astype("float16")


CASES += [
    Case("nvfp4-scale-nan", FM, "NVFP4 block scale is an E4M3 NaN code (second linear)", "nvfp4",
         ScaleWarning, (ONE, f"'{NV_B}_scale'", "nan", "[95, 3]", "'nvfp4'"),
         _call(s.set_values, NV_B + "_scale", (95, 3), 0x7F), stage="data", escalate=True,
         engines=BOTH_ENGINES),
    Case("nvfp4-global-scale-zero", FM, "NVFP4 global scale 0 (a divisor: non-finite)", "nvfp4",
         ScaleWarning, (ONE, f"'{NV_B}_global_scale'", "scale 0.0", "divides", "'nvfp4'"),
         _call(s.set_values, NV_B + "_global_scale", (0,), 0.0), stage="data", escalate=True,
         engines=BOTH_ENGINES, scaled=NV_B),
    Case("nvfp4-global-scale-inf", FM, "NVFP4 global scale is +inf", "nvfp4",
         ScaleWarning, (ONE, f"'{NV_B}_global_scale'", "scale inf", "'nvfp4'"),
         _call(s.set_values, NV_B + "_global_scale", (0,), float("inf")), stage="data",
         escalate=True, engines=BOTH_ENGINES, scaled=NV_B),
    Case("gptq-g-idx-out-of-range", FM, "GPTQ g_idx names group 7 of 2 (second linear)", "gptq2",
         FormatError, (ONE, f"'{GPTQ_V}.g_idx'", "group 7", "[63]", "'gptq'"),
         _call(s.set_values, GPTQ_V + ".g_idx", (63,), 7), stage="data", engines=BOTH_ENGINES),
    Case("aoa-writes-target-twice", T, "two AOA statements write model.b.weight", "fp8",
         TargetError, (f"'{B}'", "written twice", *(repr(t) for t in TWICE)), stage="target",
         aoa=TWICE),
    Case("float16-overflow", T, "FP8 values beyond 65504 into float16 targets", "fp8",
         TargetError, (f"'{B}'", "value(s) beyond float16", "FLEXQ_OVERFLOW=saturate"),
         _call(s.set_values, B + "_scale_inv", (2, 1), 1000.0), stage="target",
         retarget=_float16_targets, atomic=True),
]  # fmt: skip

# -- issue 28: GGUF block scales are checked before the first write too -------------
GGUF_B = s.GGUF_KEYS[1]
#: Q4_K blocks are 144 bytes, d at byte 0 and dmin at byte 2; the linear is [64, 256]: one
#: block a row.
Q4_K_BYTES = 144

CASES += [
    Case("gguf-block-scale-nan", FM, "GGUF Q4_K block scale d is NaN (second linear)", "gguf",
         ScaleWarning, (s.GGUF_FILE, f"'{GGUF_B}'", "nan", "[5, 0, 0]", "Q4_K", "'gguf'"),
         _call(s.set_gguf_half, GGUF_B, 5 * Q4_K_BYTES, float("nan")), stage="data",
         escalate=True),
    Case("gguf-block-dmin-inf", FM, "GGUF Q4_K block dmin is +inf (second linear, last row)",
         "gguf", ScaleWarning, (s.GGUF_FILE, f"'{GGUF_B}'", "inf", "[63, 0, 1]", "d/dmin", "'gguf'"),
         _call(s.set_gguf_half, GGUF_B, 63 * Q4_K_BYTES + 2, float("inf")), stage="data",
         escalate=True),
]  # fmt: skip

BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "case ids must be unique"
