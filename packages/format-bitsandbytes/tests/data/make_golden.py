"""Write ``golden/``: tensors quantized by bitsandbytes 0.50.2 itself, with its own dequantization.

Not a test: run once with torch 2.13.0 (CPU) and bitsandbytes 0.50.2 installed
(``pip install --no-deps bitsandbytes==0.50.2``) to refresh the files that
``test_bnb_golden.py`` reads. The names are the ones ``Linear4bit`` /
``Linear8bitLt._save_to_state_dict`` give a module ``X`` (``X.weight`` plus
``QuantState.as_dict(packed=True)`` under ``X.weight.``; ``X.SCB`` and
``X.weight_format`` for LLM.int8). ``expected.safetensors`` holds bnb's
``dequantize_4bit`` / ``int8_vectorwise_dequant`` results: ``<key>.f32`` with
the quant state's dtype set to float32, ``<key>.bf16`` with its own bfloat16.
For ``mlp.down_proj`` (rows of 96, not a multiple of the block) the expected
values come from bnb's pure-PyTorch ``_dequantize_4bit_compute``: its AVX-512
CPU kernel indexes absmax per row when the row length is a multiple of 16 and
returns wrong values there.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from bitsandbytes import functional as bnbf
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
from safetensors.torch import save_file

HERE = Path(__file__).parent / "golden"
CASES = {
    "model.layers.0.self_attn.q_proj": ("nf4", True, 64, (16, 64)),
    "model.layers.0.self_attn.k_proj": ("fp4", False, 64, (8, 64)),
    "model.layers.0.self_attn.v_proj": ("fp4", True, 128, (8, 128)),
    "model.layers.0.mlp.down_proj": ("nf4", True, 64, (16, 96)),
}


def main() -> None:
    torch.manual_seed(0)
    tensors: dict[str, torch.Tensor] = {}
    expected: dict[str, torch.Tensor] = {}
    for module, (quant_type, nested, blocksize, shape) in CASES.items():
        w = (torch.randn(shape) * 0.05).to(torch.bfloat16)
        packed, state = bnbf.quantize_4bit(
            w, blocksize=blocksize, compress_statistics=nested, quant_type=quant_type
        )
        key = module + ".weight"
        tensors[key] = packed
        for name, value in state.as_dict(packed=True).items():
            tensors[f"{key}.{name}"] = value
        absmax = state.absmax
        if nested:
            absmax = bnbf.dequantize_blockwise(state.absmax, state.state2) + state.offset
        if shape[1] % blocksize:
            f32 = _dequantize_4bit_compute(
                packed.reshape(-1), absmax, state.code, blocksize, shape, torch.float32
            )
        else:
            state.dtype = torch.float32
            f32 = bnbf.dequantize_4bit(packed, state)
            state.dtype = torch.bfloat16
        expected[key + ".f32"] = f32
        expected[key + ".bf16"] = f32.to(torch.bfloat16)
    w8 = torch.randn(8, 32) * 0.05
    cb, scb, _ = bnbf.int8_vectorwise_quant(w8.to(torch.float16))
    tensors["model.layers.0.mlp.up_proj.weight"] = cb
    tensors["model.layers.0.mlp.up_proj.SCB"] = scb
    tensors["model.layers.0.mlp.up_proj.weight_format"] = torch.tensor(0, dtype=torch.uint8)
    expected["model.layers.0.mlp.up_proj.weight.f32"] = bnbf.int8_vectorwise_dequant(cb, scb)
    HERE.mkdir(exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, HERE / "model.safetensors")
    save_file(expected, HERE.parent / "expected.safetensors")
    config = {"model_type": "llama", "dtype": "bfloat16", "quantization_config": {
        "quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True}}  # fmt: skip
    (HERE / "config.json").write_text(json.dumps(config, indent=1) + "\n")


if __name__ == "__main__":
    main()
