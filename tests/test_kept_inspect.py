"""``flexq inspect --json`` lists, per logical tensor, the kept forms it can be loaded in
(issue 26): one row for every kept form (FP8 per tensor, per channel, block with float32
and E8M0 scales; MXFP4 gpt-oss and compressed-tensors; NVFP4 ModelOpt and
compressed-tensors), none for a plain tensor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq import RawTensor
from flexq.cli.main import main
from flexq_fp8 import save_fp8_checkpoint
from flexq_mxfp4.encode import save_mxfp4_checkpoint
from flexq_nvfp4.encode import CT_NVFP4_CONFIG, MODELOPT_NVFP4_CONFIG
from flexq_nvfp4.encode import quantize as nvfp4_quantize

KEY, EXPERTS, NORM = (
    "model.layers.0.mlp.up_proj.weight",
    "experts.gate_up_proj",
    "model.norm.weight",
)
FP8_RULE = "W = float32(values) * scales (per tensor, channel or block)"
MX_RULE = "W = e2m1(values) * 2^(scales - 127) per 32 elements"
NV_RULE = "W = e2m1(values) * (float32(scales) * global_scale) per 16 elements"


def write(root: Path, form: str) -> Path:
    rng = np.random.default_rng(1)
    norm = {NORM: RawTensor("F32", rng.standard_normal(64).astype(np.float32))}
    w = rng.standard_normal((96, 128)).astype(np.float32)
    if form.startswith("fp8-"):
        layout, _, scale = form.removeprefix("fp8-").partition("-")
        return save_fp8_checkpoint(
            root / form,
            {KEY: w},
            layout=layout,  # type: ignore[arg-type]
            block_size=(32, 64) if layout == "block" else None,
            scale_dtype=scale or "F32",  # type: ignore[arg-type]
            others=norm,
        )
    if form == "mxfp4-gpt-oss":
        experts = {EXPERTS: rng.standard_normal((2, 64, 96)).astype(np.float32)}
        return save_mxfp4_checkpoint(root / form, experts, layout="gpt-oss", others=norm)
    if form == "mxfp4-ct":
        return save_mxfp4_checkpoint(root / form, {KEY: w}, others=norm)
    layout = "modelopt" if form == "nvfp4-modelopt" else "compressed-tensors"
    qc = MODELOPT_NVFP4_CONFIG if layout == "modelopt" else CT_NVFP4_CONFIG
    return flexq.save_checkpoint(
        root / form,
        {**norm, **nvfp4_quantize({KEY: w}, layout=layout)},  # type: ignore[arg-type]
        config={"quantization_config": qc},
    )


def part(dtypes: list[str], shape: list[int]) -> dict[str, Any]:
    return {"dtypes": dtypes, "shape": shape}


F32_OR_E8M0 = ["float32", "uint8"]
#: form -> (key, the one kept form row inspect reports for it)
EXPECTED: dict[str, tuple[str, dict[str, Any]]] = {
    "fp8-tensor": (KEY, {"form": "fp8", "values": part(["float8_e4m3fn"], [96, 128]),
                         "scales": part(F32_OR_E8M0, [1]), "global_scale": None,
                         "block": None, "rule": FP8_RULE}),
    "fp8-channel": (KEY, {"form": "fp8", "values": part(["float8_e4m3fn"], [96, 128]),
                          "scales": part(F32_OR_E8M0, [96, 1]), "global_scale": None,
                          "block": [1, 128], "rule": FP8_RULE}),
    "fp8-block": (KEY, {"form": "fp8", "values": part(["float8_e4m3fn"], [96, 128]),
                        "scales": part(F32_OR_E8M0, [3, 2]), "global_scale": None,
                        "block": [32, 64], "rule": FP8_RULE}),
    "fp8-block-U8": (KEY, {"form": "fp8", "values": part(["float8_e4m3fn"], [96, 128]),
                           "scales": part(F32_OR_E8M0, [3, 2]), "global_scale": None,
                           "block": [32, 64], "rule": FP8_RULE}),
    "mxfp4-gpt-oss": (EXPERTS, {"form": "mxfp4", "values": part(["uint8"], [2, 96, 32]),
                                "scales": part(["uint8", "float32"], [2, 96, 2]),
                                "global_scale": None, "block": [1, 16], "rule": MX_RULE}),
    "mxfp4-ct": (KEY, {"form": "mxfp4", "values": part(["uint8"], [96, 64]),
                       "scales": part(["uint8", "float32"], [96, 4]), "global_scale": None,
                       "block": [1, 16], "rule": MX_RULE}),
    "nvfp4-modelopt": (KEY, {"form": "nvfp4", "values": part(["uint8"], [96, 64]),
                             "scales": part(["float8_e4m3fn", "float32"], [96, 8]),
                             "global_scale": part(["float32"], [1]), "block": [1, 8],
                             "rule": NV_RULE}),
    "nvfp4-ct": (KEY, {"form": "nvfp4", "values": part(["uint8"], [96, 64]),
                       "scales": part(["float8_e4m3fn", "float32"], [96, 8]),
                       "global_scale": part(["float32"], [1]), "block": [1, 8],
                       "rule": NV_RULE}),
}  # fmt: skip


@pytest.mark.parametrize("form", sorted(EXPECTED))
def test_inspect_json_reports_each_kept_form_a_tensor_can_produce(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    path = write(tmp_path, form)
    assert main(["inspect", str(path), "--json"]) == 0
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)["tensors"]}
    key, want = EXPECTED[form]
    assert rows[key]["kept_forms"] == [want]
    assert rows[NORM]["kept_forms"] == []


@pytest.mark.parametrize("form", sorted(EXPECTED))
def test_the_kept_form_inspect_reports_is_the_one_a_load_accepts(tmp_path: Path, form: str) -> None:
    """The parts inspect describes (first dtype of each, its shape) load as a QuantizedTarget."""
    import paddle

    path = write(tmp_path, form)
    key, want = EXPECTED[form]

    def tensor(p: dict[str, Any]) -> Any:
        zeros = paddle.zeros(p["shape"], "float32")
        dtype = p["dtypes"][0]
        return (
            zeros.astype(paddle.float8_e4m3fn) if dtype == "float8_e4m3fn" else zeros.astype(dtype)
        )

    glob = want["global_scale"]
    qt = flexq.QuantizedTarget(
        tensor(want["values"]), tensor(want["scales"]), None if glob is None else tensor(glob)
    )
    report = flexq.load_state_dict({key: qt}, path)
    assert report.bytes_read > 0
    assert qt.values.view(paddle.uint8).numpy().any()  # the checkpoint's bytes arrived
