"""Discovery imports only what a checkpoint needs (issue 30).

Every installed format's entry point is a cheap :class:`flexq.formatkit.Format` (name,
methods, version); its config models (pydantic), detection and decoders are imported
when a checkpoint of that format is composed, and a plain checkpoint imports none of
them. The module checks run in a fresh interpreter: this test process has imported
every format long ago. A part that fails to import later is a broken plugin: disabled
with one warning, the other formats keep working.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq import RawTensor, save_checkpoint
from flexq.errors import PluginWarning
from flexq.formatkit import Format
from flexq_fp8 import save_fp8_checkpoint

#: Every first-party format's package, with the modules that only its checkpoints need.
HEAVY = {
    "fp8": ("flexq_fp8.config", "flexq_fp8.detect", "flexq_fp8.decode", "flexq_fp8.encode"),
    "int4-awq": ("flexq_int4_awq.config", "flexq_int4_awq.detect", "flexq_int4_awq.encode"),
    "gptq": ("flexq_gptq.config", "flexq_gptq.detect", "flexq_gptq.encode"),
    "mxfp4": ("flexq_mxfp4.config", "flexq_mxfp4.detect", "flexq_mxfp4.decode"),
    "nvfp4": ("flexq_nvfp4.config", "flexq_nvfp4.detect", "flexq_nvfp4.encode"),
    "ct-int": ("flexq_ct_int.config", "flexq_ct_int.detect", "flexq_ct_int.encode"),
    "bitsandbytes": ("flexq_bitsandbytes.config", "flexq_bitsandbytes.detect"),
    "quark": ("flexq_format_quark.config", "flexq_format_quark.detect"),
    "gguf": ("flexq_format_gguf.checkpoint", "flexq_format_gguf.detect"),
}

#: Run in a fresh interpreter: which heavy modules each step leaves in sys.modules.
PROBE = """
import json, sys
import flexq

heavy = json.loads(sys.argv[1])
def loaded():
    return sorted(m for mods in heavy.values() for m in mods if m in sys.modules)

steps = {"import": loaded(), "pydantic_at_import": "pydantic" in sys.modules}
rows = flexq.list_formats()
steps["formats"] = sorted(r.name for r in rows if r.error is None)
steps["discovery"] = loaded()
steps["pydantic_after_discovery"] = "pydantic" in sys.modules
plain = flexq.compose(sys.argv[2])
steps["plain_owners"] = sorted({e.owner for e in plain.entries.values()})
steps["plain"] = loaded()
steps["pydantic_after_plain"] = "pydantic" in sys.modules
fp8 = flexq.compose(sys.argv[3])
steps["fp8_owners"] = sorted({e.owner for e in fp8.entries.values()})
steps["fp8_value"] = float(fp8.load("layer.weight", "float32")[0, 0])
steps["fp8"] = loaded()
steps["ct_model_after_fp8"] = "flexq.quantconfig.compressed_tensors" in sys.modules
print(json.dumps(steps))
"""


def fresh_env() -> dict[str, str]:
    """This process's environment for a fresh interpreter: its import path, every
    installed format allowed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("FLEXQ_FORMATS", None)
    env.pop("FLEXQ_DISABLED_FORMATS", None)
    return env


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("lazy")
    bits = np.full((4, 8), 0x3FC0, np.uint16)  # bfloat16 1.5
    save_checkpoint(root / "plain", {"embed.weight": RawTensor("BF16", bits)})
    weight = np.full((128, 128), 0.5, np.float32)
    save_fp8_checkpoint(root / "fp8", {"layer.weight": weight})
    env = fresh_env()
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY), str(root / "plain"), str(root / "fp8")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_discovery_imports_no_format_module(probed: dict[str, object]) -> None:
    assert probed["formats"] == sorted(HEAVY)  # every format discovered and working
    assert probed["import"] == []
    assert probed["discovery"] == []
    if not probed["pydantic_at_import"]:
        assert probed["pydantic_after_discovery"] is False


def test_a_plain_checkpoint_imports_no_format(probed: dict[str, object]) -> None:
    assert probed["plain_owners"] == ["passthrough"]
    assert probed["plain"] == []
    if not probed["pydantic_at_import"]:
        assert probed["pydantic_after_plain"] is False


def test_an_fp8_checkpoint_imports_only_fp8(probed: dict[str, object]) -> None:
    assert probed["fp8_owners"] == ["fp8"]
    assert probed["fp8_value"] == 0.5
    loaded = set(probed["fp8"])  # type: ignore[call-overload]
    assert {"flexq_fp8.config", "flexq_fp8.detect", "flexq_fp8.decode"} <= loaded
    others = {m for name, mods in HEAVY.items() if name != "fp8" for m in mods}
    assert loaded.isdisjoint(others), sorted(loaded & others)
    assert "flexq_fp8.encode" not in loaded  # a load never imports the encoder
    # its config says `quant_method: fp8`: the compressed-tensors model is not built
    assert probed["ct_model_after_fp8"] is False


#: ``flexq list-formats --json`` in a fresh interpreter; the heavy modules it left.
LIST_FORMATS = """
import json, sys
from flexq.cli.main import main

try:
    main(["list-formats", "--json"])
except SystemExit:
    pass
heavy = json.loads(sys.argv[1])
sys.stderr.write(json.dumps(sorted(m for ms in heavy.values() for m in ms if m in sys.modules)))
"""


def test_list_formats_imports_no_format_module() -> None:
    env = fresh_env()
    out = subprocess.run(
        [sys.executable, "-c", LIST_FORMATS, json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    rows = json.loads(out.stdout)
    listed = {r["name"]: r for r in rows}
    assert set(HEAVY) <= set(listed)
    assert "fp8" in listed["fp8"]["methods"]  # methods come from the cheap plugin object
    assert json.loads(out.stderr.strip().splitlines()[-1]) == []


def test_a_part_that_fails_to_import_disables_its_format(tmp_path: Path) -> None:
    bits = np.full((2, 4), 0x3F80, np.uint16)  # bfloat16 1.0
    save_checkpoint(tmp_path, {"w": RawTensor("BF16", bits)})
    # Every part names a module that is not installed: discovery cannot tell.
    gone = {
        part: f"flexq_no_such_module_xyz.{part}:{part}" for part in ("analyze", "plan", "decode")
    }
    broken: Format[Any] = Format(
        "lazybroken", "a format whose modules are gone", methods=("lazybroken",), **gone
    )
    flexq.register_format(broken)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ct = flexq.compose(tmp_path)
            again = flexq.compose(tmp_path)
        said = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
        assert len(said) == 1, said
        assert "lazybroken" in said[0]
        assert "flexq_no_such_module_xyz" in said[0]
        assert "disabled" in said[0]
        for found in (ct, again):
            assert found.entries["w"].owner == "passthrough"
            assert found.load("w", "float32").tolist() == [[1.0] * 4] * 2
        row = next(r for r in flexq.list_formats() if r.name == "lazybroken")
        assert row.error is not None
        assert "failed to import" in row.error
    finally:
        flexq.unregister_format("lazybroken")
