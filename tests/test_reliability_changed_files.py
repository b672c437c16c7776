"""Reliability: a checkpoint file that changes under a load is an error, never wrong values.

The "Files that change under a load" rows of docs/reliability.md. Each data file is
opened once, when compose reads its header; its identity (device, inode, size,
mtime) is checked again before its data is read, and reads are ``preadv`` calls that
see a truncation as a short read. So a shard replaced after compose (once: read with
the old header, silently wrong values), truncated after compose (once: ``TypeError:
buffer is too small``) or truncated in place during a load (once: SIGBUS) is a
``CheckpointError`` naming the file and saying to reload, every target as it was and
the checkpoint untouched.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq.compose import composition_of
from flexq.errors import CheckpointError

from .reliability import surgery
from .test_reliability import bits, make_targets, snapshot

SHARD2 = "model-00002-of-00002.safetensors"
CHANGED = "the file changed since it was opened"


def replace_shard(ckpt: Path) -> None:
    """Another checkpoint's shard of the same layout renamed over this one's (the old
    header's offsets fit the new bytes exactly: the case that used to load silently)."""
    other = surgery.fp8(ckpt.parent / "other", sharded=True)
    blob = bytearray((other / SHARD2).read_bytes())
    blob[-64:] = bytes(64)  # other values, same header
    new = ckpt.parent / "new.safetensors"
    new.write_bytes(bytes(blob))
    os.replace(new, ckpt / SHARD2)


def truncate_shard(ckpt: Path) -> None:
    f = ckpt / SHARD2
    os.truncate(f, f.stat().st_size - 100)


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "shard-replaced-after-compose": (replace_shard, "another file now has its name"),
    "shard-truncated-after-compose": (truncate_shard, "bytes when opened"),
}


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_shard_changed_after_compose_is_an_error_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, engine: str
) -> None:
    ckpt = surgery.fp8(tmp_path / "ckpt", sharded=True)
    damage, detail = CASES[case]

    def compose_then_change(*args: Any, **kwargs: Any) -> Any:
        ct = composition_of(*args, **kwargs)
        damage(ckpt)  # between the header reads and the first data read
        return ct

    # load_state_dict composes through flexq.load.agree
    monkeypatch.setattr("flexq.load.agree.composition_of", compose_then_change)
    targets = make_targets(ckpt)
    before = bits(targets)
    with pytest.raises(CheckpointError) as err:
        flexq.load_state_dict(targets, ckpt, engine=engine, max_inflight_bytes=1)  # type: ignore[arg-type]
    message = str(err.value)
    assert SHARD2 in message
    assert CHANGED in message
    assert detail in message
    assert "reload" in message
    assert bits(targets) == before


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_composed_transform_refuses_a_shard_changed_since_compose(
    tmp_path: Path, case: str
) -> None:
    ckpt = surgery.fp8(tmp_path / "ckpt", sharded=True)
    ct = flexq.compose(ckpt)
    key = surgery.FP8_KEYS[1]  # in shard 2
    CASES[case][0](ckpt)
    files = snapshot(ckpt)
    with pytest.raises(CheckpointError, match=CHANGED):
        ct.load(key, "float32")
    assert snapshot(ckpt) == files
    # A fresh compose reads the new file's header (and, here, its new values).
    if case == "shard-replaced-after-compose":
        assert flexq.compose(ckpt).load(key, "float32").shape == (96, 64)


def test_a_shard_rewritten_in_place_after_compose_is_an_error(tmp_path: Path) -> None:
    ckpt = surgery.fp8(tmp_path / "ckpt", sharded=True)
    ct = flexq.compose(ckpt)
    f = ckpt / SHARD2
    blob = bytearray(f.read_bytes())
    blob[-1] ^= 0xFF
    st = f.stat()
    with open(f, "r+b") as fh:  # same inode, same size, new bytes
        fh.write(bytes(blob))
    # The kernel's clock may not have ticked since the checkpoint was written.
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(CheckpointError, match="modified since it was opened"):
        ct.load(surgery.FP8_KEYS[1], "float32")


#: A load that truncates its shard in place at its first data read: between the identity
#: check and the read, the window no check can close. It reports what it got as JSON.
TRUNCATE_DURING_LOAD = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np, paddle
    import flexq

    ckpt, shard = sys.argv[1], sys.argv[2]
    real = os.preadv
    def truncating(fd, buffers, offset, *flags):  # flags: the page-cache-only read's
        os.truncate(shard, offset)  # cut where this read starts; the header stays
        os.preadv = real
        return real(fd, buffers, offset, *flags)
    os.preadv = truncating
    keys = json.loads(sys.argv[3])
    targets = {k: paddle.full(s, 7.0, "float32") for k, s in keys.items()}
    try:
        flexq.load_state_dict(targets, ckpt, engine="direct")
    except flexq.FlexqError as exc:
        untouched = all(bool((t.numpy() == 7.0).all()) for t in targets.values())
        print(json.dumps({"error": type(exc).__name__, "message": str(exc), "untouched": untouched}))
    else:
        print(json.dumps({"error": None}))
    """
)


def test_a_shard_truncated_in_place_during_a_load_is_an_error_not_sigbus(tmp_path: Path) -> None:
    # One shard large enough that its data lies well past the first page.
    rng = np.random.default_rng(0)
    weights = {"model.big.weight": rng.standard_normal((512, 512)).astype(np.float32)}
    from flexq_fp8 import save_fp8_checkpoint

    ckpt = save_fp8_checkpoint(tmp_path / "ckpt", weights, layout="block", block_size=(128, 128))
    shard = next(ckpt.glob("*.safetensors"))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            TRUNCATE_DURING_LOAD,
            str(ckpt),
            str(shard),
            json.dumps({k: list(v.shape) for k, v in weights.items()}),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Killed by a signal (SIGBUS: -7) shows as a negative return code.
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"] == "CheckpointError"
    assert shard.name in out["message"]
    assert CHANGED in out["message"]
    assert "ends before byte" in out["message"]
    assert out["untouched"] is True
    assert "Traceback" not in proc.stderr


#: The rows of docs/reliability.md's "Files that change under a load": case -> test.
DOCUMENTED = {
    "shard-replaced-after-compose": "test_a_shard_changed_after_compose_is_an_error_and_changes_nothing",
    "shard-truncated-after-compose": "test_a_shard_changed_after_compose_is_an_error_and_changes_nothing",
    "shard-rewritten-in-place": "test_a_shard_rewritten_in_place_after_compose_is_an_error",
    "shard-truncated-during-load": "test_a_shard_truncated_in_place_during_a_load_is_an_error_not_sigbus",
}


def test_the_reliability_page_lists_each_case_with_its_error() -> None:
    text = (Path(__file__).parents[1] / "docs" / "reliability.md").read_text()
    section = text.split("## Files that change under a load", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| [^|]+ \| `(\w+)` \|", section, flags=re.M)
    assert dict(rows) == dict.fromkeys(DOCUMENTED, "CheckpointError")
    assert set(CASES) <= DOCUMENTED.keys()
    assert all(callable(globals()[test]) for test in DOCUMENTED.values())


def test_paddles_scratch_links_open_the_files_compose_opened(tmp_path: Path) -> None:
    from flexq.load.sources import scratch_checkpoint

    ckpt = surgery.fp8(tmp_path / "ckpt", sharded=True)
    ct = flexq.compose(ckpt)
    original = (ckpt / SHARD2).read_bytes()
    replace_shard(ckpt)
    assert (ckpt / SHARD2).read_bytes() != original
    with scratch_checkpoint(ct.checkpoint) as scratch:
        # Paddle opens the scratch link by name: it gets the file whose header
        # planned the boxes, not the one renamed over it since.
        assert (Path(scratch) / SHARD2).read_bytes() == original
    ct.checkpoint.close()
