"""``flexq verify`` / ``flexq.verify()`` against real damage (issue 27).

Checkpoints are written with the formats' own encoders (tests/reliability/surgery.py),
then damaged the way a bad download or a buggy producer does: a corrupted cache blob,
a missing or truncated shard, NaN and zero scales, a config whose block size disagrees
with the scales, a tensor-parallel degree that cuts FP8 blocks.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import flexq
from flexq.check import deep as deep_module
from flexq.check import hashes
from flexq.check.deep import boxes
from flexq.check.report import VerifyReport
from flexq.cli.main import main
from tests.conftest import dequantized_copy
from tests.reliability import surgery

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parent.parent
SHARD_2 = "model-00002-of-00002.safetensors"
#: How long a blocked hash waits for the interrupt at most: a hang fails, it does not stall.
HANG_BOUND_S = 60


def snapshot_of(ckpt: Path, cache: Path) -> Path:
    """``ckpt`` as a Hugging Face cache snapshot: blobs named by their sha256, links."""
    tree = cache / "models--org--tiny"
    snap = tree / "snapshots" / ("ab" * 20)
    (tree / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in sorted(ckpt.iterdir()):
        sha = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, tree / "blobs" / sha)
        (snap / f.name).symlink_to(Path("..", "..", "blobs", sha))
    return snap


def sharded_snapshot(tmp_path: Path) -> Path:
    ckpt = surgery.fp8(tmp_path / "plain", sharded=True)
    assert (ckpt / SHARD_2).exists()
    return snapshot_of(ckpt, tmp_path / "hub")


def nan_first_scale(ckpt: Path, key: str) -> None:
    """Overwrite the first F32 value of ``key`` with NaN in place (works on any shard)."""
    file = surgery.file_of(ckpt, key)
    header, data = surgery.read_raw(file)
    begin, _ = surgery.offsets(ckpt, key)
    nan = struct.pack("<f", float("nan"))
    surgery.write_raw(file, header, data[:begin] + nan + data[begin + 4 :])


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_clean_checkpoint_of_every_format_verifies_with_exit_0(
    format_ckpt: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # Every installed format (compressed-tensors int and bitsandbytes included) and the
    # plugin-guide example, each written by its own encoder.
    fmt, ckpt = format_ckpt
    report = flexq.verify(ckpt, deep=True)
    assert report.problems == []
    owners = {row.format for row in report.summary}
    assert fmt in owners
    assert "passthrough" in owners
    assert report.scales
    assert all(s.nan == s.inf == 0 for s in report.scales)  # a code book holds a zero
    assert report.deep
    assert report.deep_mode == "sample"
    assert all(d.nonfinite == 0 and d.min is not None for d in report.deep)
    # keep-quantized holds the stored bytes; a bf16 load holds 2 bytes per element.
    assert report.memory.keep_quantized == sum(r.stored_bytes for r in report.summary)
    assert report.memory.float32 == 2 * report.memory.bfloat16 > report.memory.keep_quantized
    code, out, err = run(["verify", str(ckpt)], capsys)
    assert (code, err) == (0, "")
    assert "no problems found" in out


def test_default_mode_reads_only_the_scales_never_the_weights(tmp_path: Path) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")
    report = flexq.verify(ckpt)
    scale_bytes = sum(flexq.Checkpoint(ckpt).info(s.tensor).nbytes for s in report.scales)
    assert report.bytes_read == scale_bytes == (2 * 2 + 3 * 2) * 4


def test_sha256_names_the_corrupted_blob_of_a_cache_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = sharded_snapshot(tmp_path)
    blob = (snap / SHARD_2).resolve()
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0x01  # one bit of the norm's data: headers and scales stay valid
    blob.write_bytes(bytes(data))
    assert flexq.verify(snap).problems == []  # metadata cannot see it
    report = flexq.verify(snap, sha256=True)
    assert [(p.kind, p.file) for p in report.problems] == [("corrupt-blob", SHARD_2)]
    assert report.hashed_bytes == sum(
        p.stat().st_size for p in (snap.parent.parent / "blobs").iterdir()
    )
    code, out, err = run(["verify", str(snap), "--sha256"], capsys)
    assert code == 1
    assert SHARD_2 in out
    assert "corrupt" in out
    assert err == f"flexq: 1 problem(s) in {snap}\n"


def test_a_missing_shard_is_named_and_the_other_shard_is_still_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = sharded_snapshot(tmp_path)
    (snap / SHARD_2).unlink()
    # the other shard gets a NaN scale: it must still be found
    report = flexq.verify(snap)
    kinds = {p.kind for p in report.problems}
    assert "missing-shard" in kinds
    missing = next(p for p in report.problems if p.kind == "missing-shard")
    assert missing.file == SHARD_2
    assert SHARD_2 in missing.message
    assert [s.tensor for s in report.scales] == ["model.a.weight_scale_inv"]
    code, out, _ = run(["verify", str(snap)], capsys)
    assert code == 1
    assert "missing" in out


def test_a_truncated_shard_is_named_with_expected_and_actual_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = surgery.fp8(tmp_path / "plain", sharded=True)
    nan_first_scale(plain, "model.a.weight_scale_inv")  # in shard 1
    snap = snapshot_of(plain, tmp_path / "hub")
    blob = (snap / SHARD_2).resolve()
    size = blob.stat().st_size
    os.truncate(blob, size - 100)
    report = flexq.verify(snap)
    truncated = [p for p in report.problems if p.kind == "truncated-shard"]
    assert len(truncated) == 1
    assert truncated[0].file == SHARD_2
    assert f"{size - 100:,} bytes" in truncated[0].message
    assert f"implies {size:,}" in truncated[0].message
    row = next(s for s in report.shards if s.file == SHARD_2)
    assert (row.expected_bytes, row.actual_bytes, row.ok) == (size, size - 100, False)
    # shard 1 was still checked: its NaN scale is reported too
    scale = [p for p in report.problems if p.kind == "scale"]
    assert len(scale) == 1
    assert "model.a.weight_scale_inv" in scale[0].message
    code, _, _ = run(["verify", str(snap)], capsys)
    assert code == 1


def test_a_stray_shard_and_a_tensor_stored_twice_are_problems(tmp_path: Path) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8", sharded=True)
    shutil.copyfile(ckpt / SHARD_2, ckpt / "model-extra.safetensors")
    report = flexq.verify(ckpt)
    assert [(p.kind, p.file) for p in report.problems] == [
        ("stray-shard", "model-extra.safetensors")
    ]
    (ckpt / "model-extra.safetensors").unlink()
    surgery.set_index_file(ckpt, "model.norm.weight", "model-00001-of-00002.safetensors")
    shutil.copyfile(ckpt / SHARD_2, ckpt / "copy.safetensors")
    surgery.set_index_file(ckpt, "model.b.weight", "copy.safetensors")
    kinds = sorted(p.kind for p in flexq.verify(ckpt).problems)
    assert "duplicate-tensor" in kinds or "index" in kinds


NAN_AND_ZERO = [
    ("fp8", surgery.fp8, "model.b.weight_scale_inv", (1, 0), float("nan"), "nan"),
    ("fp8", surgery.fp8, "model.b.weight_scale_inv", (1, 0), 0.0, "zero"),
    ("mxfp4", surgery.mxfp4, "model.experts.gate_up_proj_scales", (1, 0, 0), 0xFF, "nan"),
    # E8M0 byte 0 is 2**-127, the smallest scale: a zeroed scale byte
    ("mxfp4", surgery.mxfp4, "model.experts.gate_up_proj_scales", (1, 0, 0), 0, "subnormal"),
    ("nvfp4", surgery.nvfp4, "model.b.weight_scale", (3, 1), 0x7F, "nan"),
    ("nvfp4", surgery.nvfp4, "model.b.weight_scale", (3, 1), 0, "zero"),
    ("gptq", surgery.gptq, "model.k_proj.scales", (1, 5), float("nan"), "nan"),
    ("gptq", surgery.gptq, "model.k_proj.scales", (1, 5), 0.0, "zero"),
]


@pytest.mark.parametrize(
    ("builder", "key", "index", "value", "counted"),
    [case[1:] for case in NAN_AND_ZERO],
    ids=[f"{c[0]}-{c[5]}" for c in NAN_AND_ZERO],
)
def test_nan_and_zero_scales_are_counted_and_named(
    builder: Callable[[Path], Path],
    key: str,
    index: tuple[int, ...],
    value: float,
    counted: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ckpt = builder(tmp_path / "ckpt")
    surgery.set_values(ckpt, key, index, value)
    report = flexq.verify(ckpt)
    row = next(s for s in report.scales if s.tensor == key)
    assert getattr(row, counted) == 1
    others = {"nan", "inf", "zero", "negative", "subnormal"} - {counted}
    assert all(getattr(row, k) == 0 for k in others)
    assert any(p.kind == "scale" and key in p.message for p in report.problems)
    code, out, _ = run(["verify", str(ckpt)], capsys)
    assert code == 1
    assert key in out


def test_deep_reports_non_finite_decoded_values(tmp_path: Path) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")
    surgery.set_values(ckpt, "model.a.weight_scale_inv", (0, 0), float("inf"))
    report = flexq.verify(ckpt, deep=True)
    row = next(d for d in report.deep if d.tensor == "model.a.weight")
    assert row.values == 64 * 64
    assert row.boxes == [[[0, 0], [64, 64]]]  # under 128 rows: the sample is the tensor
    assert 0 < row.nonfinite <= 32 * 32  # the one block the scale covers (zeros stay NaN/0)
    assert any(p.kind == "deep" and "model.a.weight" in p.message for p in report.problems)


def test_a_config_block_size_that_disagrees_with_the_scales_is_a_problem(tmp_path: Path) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")
    surgery.edit_quant_config(ckpt, weight_block_size=[64, 64])
    report = flexq.verify(ckpt)
    assert [p.kind for p in report.problems] == ["coverage"]
    assert "model.a.weight_scale_inv" in report.problems[0].message


def test_tp_that_splits_fp8_blocks_is_named_and_is_information(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")  # blocks of 32x32, weights [64, 64] and [96, 64]
    aligned = flexq.verify(ckpt, tp=2)
    rows = {(s.tensor, s.split): s for s in aligned.splits}
    assert rows["model.a.weight", "column"].aligned
    assert rows["model.a.weight", "row"].aligned
    # [96, 64] in 2: 48 rows each, so the cut at row 48 falls inside the second block row
    assert not rows["model.b.weight", "column"].aligned
    assert "48" in rows["model.b.weight", "column"].why
    four = {(s.tensor, s.split): s for s in flexq.verify(ckpt, tp=4).splits}
    assert not four["model.a.weight", "row"].aligned  # 16 columns per rank < 32
    assert aligned.problems == []
    code, out, _ = run(["verify", str(ckpt), "--tp", "4"], capsys)
    assert code == 0
    assert "model.a.weight row x4" in out


def test_ep_splits_gpt_oss_experts(tmp_path: Path) -> None:
    ckpt = surgery.mxfp4(tmp_path / "mx")
    rows = {(s.tensor, s.split, s.ways): s.aligned for s in flexq.verify(ckpt, ep=2).splits}
    assert rows == {("model.experts.gate_up_proj", "expert", 2): True}
    three = {(s.split, s.ways): s.aligned for s in flexq.verify(ckpt, ep=3).splits}
    assert three == {("expert", 3): False}  # 2 experts do not divide by 3


def test_a_manifest_of_a_plain_directory_names_the_changed_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")
    manifest = tmp_path / "fp8.sha256.json"
    before = sorted(p.name for p in ckpt.iterdir())
    code, _, err = run(["verify", str(ckpt), "--write-manifest", str(manifest)], capsys)
    assert (code, err) == (0, "")
    assert sorted(p.name for p in ckpt.iterdir()) == before  # nothing written into it
    assert flexq.verify(ckpt, manifest=manifest).problems == []
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["note"] = "edited"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    report = flexq.verify(ckpt, manifest=manifest)
    assert [(p.kind, p.file) for p in report.problems] == [("manifest", "config.json")]


def test_usage_and_unreadable_input_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")
    code, out, err = run(["verify", str(tmp_path / "nope")], capsys)
    assert code == 2
    assert out == ""
    assert err.startswith("flexq: error: ")
    assert err.count("\n") == 1
    # a manifest may not be written into the checkpoint it describes
    code, _, err = run(["verify", str(ckpt), "--write-manifest", str(ckpt / "m.json")], capsys)
    assert code == 2
    assert "never writes into the checkpoint" in err
    assert err.count("\n") == 1
    assert not (ckpt / "m.json").exists()
    snap = sharded_snapshot(tmp_path / "cache")
    blobs = snap.parent.parent / "blobs"
    code, _, err = run(["verify", str(snap), "--write-manifest", str(blobs / "m.json")], capsys)
    assert code == 2
    assert "never writes into the checkpoint" in err
    assert not (blobs / "m.json").exists()
    # --sha256 on a plain directory: no blob names to check against
    code, _, err = run(["verify", str(ckpt), "--sha256"], capsys)
    assert code == 2
    assert "--write-manifest" in err
    with pytest.raises(SystemExit) as exited:
        main(["verify", str(ckpt), "--tp", "0"])
    assert exited.value.code == 2


def test_json_follows_the_published_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")
    surgery.set_values(ckpt, "model.a.weight_scale_inv", (0, 1), 0.0)
    code, out, _ = run(["verify", str(ckpt), "--json", "--tp", "2", "--deep"], capsys)
    assert code == 1
    doc = json.loads(out)
    report = VerifyReport.model_validate(doc)
    assert [p.kind for p in report.problems] == ["scale"]
    schema = json.loads((ROOT / "docs" / "schema" / "verify.json").read_text())
    assert schema == VerifyReport.model_json_schema()
    assert set(doc) == set(schema["properties"]) == set(schema["required"])


def test_a_repo_id_resolves_to_its_cache_snapshot_and_sha256_counts_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = sharded_snapshot(tmp_path)
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text(snap.name)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    seen: list[int] = []
    report = flexq.verify("org/tiny", sha256=True, progress=seen.append)
    assert report.problems == []
    assert Path(report.path).resolve() == snap.resolve()
    assert sum(seen) == report.hashed_bytes > 0
    code, out, err = run(["verify", "org/tiny", "--sha256"], capsys)
    assert (code, err) == (0, "")
    assert f"sha256: {report.hashed_bytes:,} bytes hashed" in out


def test_a_shard_cut_inside_its_header_is_a_truncated_shard(tmp_path: Path) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8", sharded=True)
    os.truncate(ckpt / SHARD_2, 20)
    report = flexq.verify(ckpt)
    assert [(p.kind, p.file) for p in report.problems] == [("truncated-shard", SHARD_2)]
    assert [s.tensor for s in report.scales] == ["model.a.weight_scale_inv"]


def test_with_keep_quantized_a_split_that_cuts_fp8_blocks_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")
    problems = flexq.verify(ckpt, tp=2, keep_quantized=True).problems
    # only model.b.weight's column split (48 rows per rank, blocks of 32) cuts blocks
    assert [p.kind for p in problems] == ["layout"]
    assert "'model.b.weight'" in problems[0].message
    assert "column" in problems[0].message
    code, out, _ = run(["verify", str(ckpt), "--tp", "2", "--keep-quantized"], capsys)
    assert code == 1
    assert "problem (layout)" in out
    code, _, _ = run(["verify", str(ckpt), "--tp", "2"], capsys)
    assert code == 0


def test_deep_samples_first_middle_and_last_bands_and_all_covers_every_row() -> None:
    assert boxes((1000, 64), "sample") == [
        ((0, 0), (128, 64)), ((436, 0), (128, 64)), ((872, 0), (128, 64))
    ]  # fmt: skip
    assert boxes((4, 8, 16), "sample") == [
        ((0, 0, 0), (1, 8, 16)), ((1, 0, 0), (1, 8, 16)), ((3, 0, 0), (1, 8, 16))
    ]  # fmt: skip
    assert boxes((96, 64), "sample") == [((0, 0), (96, 64))]
    bands = boxes((1000, 64), "all")
    assert sum(shape[0] for _, shape in bands) == 1000
    assert [offset[0] for offset, _ in bands] == sorted({o[0] for o, _ in bands})


def test_deep_all_decodes_every_value_and_a_sample_fewer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")  # model.b.weight [96, 64]
    monkeypatch.setattr(deep_module, "DEEP_ROWS", 16)
    sample = {d.tensor: d for d in flexq.verify(ckpt, deep=True).deep}
    assert sample["model.b.weight"].boxes == [
        [[0, 0], [16, 64]], [[40, 0], [16, 64]], [[80, 0], [16, 64]]
    ]  # fmt: skip
    assert sample["model.b.weight"].values == 3 * 16 * 64
    report = flexq.verify(ckpt, deep="all")
    assert report.deep_mode == "all"
    assert {d.tensor: d.values for d in report.deep} == {
        "model.a.weight": 64 * 64, "model.b.weight": 96 * 64
    }  # fmt: skip
    row = next(d for d in report.deep if d.tensor == "model.b.weight")
    assert row.min is not None
    assert row.max is not None
    assert row.min < 0 < row.max
    code, out, _ = run(["verify", str(ckpt), "--deep=all"], capsys)
    assert code == 0
    assert f"deep (all): 2 tensors, {64 * 64 + 96 * 64:,} values, 0 non-finite" in out


def test_against_a_dequantized_twin_is_bit_exact_and_names_the_one_element_that_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")
    twin = tmp_path / "twin"
    code, _, err = run(["convert", str(ckpt), str(twin), "--dtype", "bfloat16"], capsys)
    assert (code, err) == (0, "")
    clean = flexq.verify(ckpt, deep="all", against=twin)
    assert clean.problems == []
    assert (clean.against, clean.tolerance) == (str(twin), None)
    assert all(d.compared == d.values and d.differ == 0 for d in clean.deep)
    assert all(d.max_abs_diff == 0.0 for d in clean.deep)
    # one bfloat16 element of the twin one unit in the last place off
    bits = int(surgery.tensors_of(twin)["model.b.weight"].data[50, 7])
    surgery.set_values(twin, "model.b.weight", (50, 7), bits ^ 1)
    report = flexq.verify(ckpt, against=twin)  # the default sample covers row 50
    assert [p.kind for p in report.problems] == ["against"]
    message = report.problems[0].message
    assert "'model.b.weight'" in message
    assert "1 of 6144" in message
    assert "first at [50, 7]: " in message
    assert "np.float32" not in message
    assert "bit for bit" in message
    row = next(d for d in report.deep if d.tensor == "model.b.weight")
    assert (row.compared, row.differ) == (96 * 64, 1)
    assert row.max_abs_diff is not None
    assert 0 < row.max_abs_diff < 1e-3
    # within a stated tolerance the ulp passes, and the report says which tolerance
    loose = flexq.verify(ckpt, against=twin, tolerance=1e-3)
    assert (loose.problems, loose.tolerance) == ([], 1e-3)
    code, out, _ = run(["verify", str(ckpt), "--against", str(twin)], capsys)
    assert code == 1
    assert "problem (against)" in out
    code, out, _ = run(
        ["verify", str(ckpt), "--against", str(twin), "--tolerance", "0.001"], capsys
    )
    assert code == 0
    assert f"compared with {twin} within 0.001" in out


def test_against_a_float32_twin_and_one_that_lacks_a_tensor(tmp_path: Path) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")
    twin = dequantized_copy(ckpt, tmp_path / "twin")
    assert flexq.verify(ckpt, deep="all", against=twin).problems == []
    surgery.drop(twin, "model.a.weight")
    problems = flexq.verify(ckpt, against=twin).problems
    assert [p.kind for p in problems] == ["against"]
    assert "'model.a.weight'" in problems[0].message
    assert "has no tensor of that name" in problems[0].message
    with pytest.raises(flexq.FlexqError, match="tolerance"):
        flexq.verify(ckpt, tolerance=0.1)  # a tolerance with nothing to compare with
    with pytest.raises(flexq.FlexqError, match="tolerance"):
        flexq.verify(ckpt, against=twin, tolerance=float("nan"))
    with pytest.raises(flexq.FlexqError, match="'some'"):
        flexq.verify(ckpt, deep="some")  # type: ignore[arg-type]


def test_sigint_while_hashing_in_parallel_exits_130_and_writes_no_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8", sharded=True)  # 4 files: 4 hashing threads
    started = threading.Event()
    entered: list[Path] = []
    stopped: list[bool] = []
    ended = threading.Semaphore(0)
    real = hashes.sha256_file

    def blocked(
        path: Path,
        progress: Callable[[int], None] | None = None,
        stop: threading.Event | None = None,
    ) -> str:
        # Each hash blocks until the interrupt sets the stop event every hash watches.
        assert stop is not None
        entered.append(path)
        started.set()
        try:
            stopped.append(stop.wait(HANG_BOUND_S))
            return real(path, progress, stop)
        finally:
            ended.release()

    def interrupt_once_hashing() -> None:
        if started.wait(HANG_BOUND_S):
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    monkeypatch.setattr(hashes, "sha256_file", blocked)
    sender = threading.Thread(target=interrupt_once_hashing)
    sender.start()
    manifest = tmp_path / "out" / "fp8.sha256.json"
    manifest.parent.mkdir()
    code, out, err = run(["verify", str(ckpt), "--write-manifest", str(manifest)], capsys)
    sender.join()
    assert (code, out, err) == (130, "", "flexq: interrupted by SIGINT\n")
    # every hash thread has ended before the command returns (none left running)
    assert all(ended.acquire(blocking=False) for _ in entered)
    assert entered  # at least one hash was under way ...
    assert stopped == [True] * len(entered)  # ... and each was stopped, not timed out
    assert list(manifest.parent.iterdir()) == []  # no manifest, whole or part


@pytest.mark.skipif(
    importlib.util.find_spec("paddleformers") is not None,
    reason="the error without paddleformers; tests/paddleformers covers --model with it",
)
def test_model_without_paddleformers_or_without_tp_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = surgery.fp8(tmp_path / "fp8")
    with pytest.raises(flexq.FlexqError, match="pip install paddleformers"):
        flexq.verify(ckpt, tp=2, model="LlamaForCausalLM")
    code, out, err = run(["verify", str(ckpt), "--model", "LlamaForCausalLM"], capsys)
    assert (code, out) == (2, "")
    assert (
        err
        == "flexq: error: --model LlamaForCausalLM: give the tensor-parallel degree too (--tp N)\n"
    )
    code, _, err = run(["verify", str(ckpt), "--tp", "2", "--model", "LlamaForCausalLM"], capsys)
    assert code == 2
    assert err.startswith(
        "flexq: error: --model LlamaForCausalLM: the split rules are PaddleFormers'"
    )
    assert err.count("\n") == 1


def test_deep_all_finds_what_the_sample_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = surgery.gptq(tmp_path / "gptq")  # [64, 64]; scales [in/32, out]
    surgery.set_values(ckpt, "model.k_proj.scales", (0, 20), float("nan"))  # out row 20 only
    monkeypatch.setattr(deep_module, "DEEP_ROWS", 16)  # samples rows 0-15, 24-39, 48-63
    sample = next(d for d in flexq.verify(ckpt, deep=True).deep)
    assert sample.boxes == [[[0, 0], [16, 64]], [[24, 0], [16, 64]], [[48, 0], [16, 64]]]
    assert sample.nonfinite == 0
    whole = flexq.verify(ckpt, deep="all")
    row = next(d for d in whole.deep)
    assert (row.values, row.nonfinite) == (64 * 64, 32)  # row 20's first group of 32
    assert any(p.kind == "deep" and "model.k_proj.weight" in p.message for p in whole.problems)
