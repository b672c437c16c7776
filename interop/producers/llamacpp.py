"""llama.cpp as the GGUF producer: its own convert_hf_to_gguf.py and quantizer.

Tiny random HF models (llama, qwen2, qwen3, and the MoE qwen2moe / qwen3moe; hidden
256 so the K-quants' 256-element super-blocks fit every row) are saved with
transformers, converted to an F32 GGUF by the ``convert_hf_to_gguf.py`` that
llama-cpp-python's sdist vendors (run against its vendored gguf-py, in a subprocess),
and quantized with
``llama_cpp.llama_model_quantize`` to each type. The oracle is transformers' own GGUF
loading of the same file (``from_pretrained(dir, gguf_file=...)``, which dequantizes
with gguf-py and undoes llama's Q/K permutation), in float32.

The converter's tokenizer step is replaced by a fixed word list: llama.cpp refuses a
tokenizer whose pre-tokenizer hash it does not know, and the tensors and metadata do
not depend on it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import torch

#: llama.cpp file types (``LLAMA_FTYPE_*``) to build, by the ggml type of their linears.
FTYPES = {
    "Q8_0": "MOSTLY_Q8_0",
    "Q4_0": "MOSTLY_Q4_0",
    "Q4_1": "MOSTLY_Q4_1",
    "Q5_0": "MOSTLY_Q5_0",
    "Q5_1": "MOSTLY_Q5_1",
    "Q2_K": "MOSTLY_Q2_K",
    "Q3_K_M": "MOSTLY_Q3_K_M",
    "Q4_K_M": "MOSTLY_Q4_K_M",
    "Q5_K_M": "MOSTLY_Q5_K_M",
    "Q6_K": "MOSTLY_Q6_K",
    "IQ4_NL": "MOSTLY_IQ4_NL",
    "IQ4_XS": "MOSTLY_IQ4_XS",
    "F16": "MOSTLY_F16",
    "BF16": "MOSTLY_BF16",
}
VOCAB = 256
ARCHS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
#: The MoE architectures (4 experts of 2 used, experts 256 wide, qwen2moe's shared
#: expert 256 wide too).
MOE_ARCHS = {"qwen2moe": "Qwen2MoeForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM"}
_MOE: dict[str, dict[str, Any]] = {
    "qwen2moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                 "shared_expert_intermediate_size": 256},
    "qwen3moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                 "head_dim": 64},
}  # fmt: skip
#: Replaces the converter's set_vocab (see the module doc).
_CONVERT = """
import sys
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[1:]]
import convert_hf_to_gguf as c
from conversion.llama import LlamaModel
from conversion.qwen import Qwen2Model, Qwen2MoeModel, Qwen3Model, Qwen3MoeModel

def set_vocab(self):
    n = self.hparams["vocab_size"]
    self.gguf_writer.add_tokenizer_model("gpt2")
    self.gguf_writer.add_tokenizer_pre("default")
    self.gguf_writer.add_token_list([f"t{i}" for i in range(n)])
    self.gguf_writer.add_token_types([1] * n)

for cls in (LlamaModel, Qwen2Model, Qwen3Model, Qwen2MoeModel, Qwen3MoeModel):
    cls.set_vocab = set_vocab
c.main()
"""


def vendored_llama_cpp(directory: Path) -> Path:
    """The llama.cpp tree vendored by the llama-cpp-python sdist (``FLEXQ_LLAMA_CPP_SDIST``,
    which ``nox -s interop`` downloads), extracted into ``directory``."""
    sdist = Path(os.environ["FLEXQ_LLAMA_CPP_SDIST"])
    with tarfile.open(sdist) as tar:
        wanted = ("/vendor/llama.cpp/convert_hf_to_gguf.py", "/vendor/llama.cpp/gguf-py/",
                  "/vendor/llama.cpp/conversion/")  # fmt: skip
        members = [m for m in tar.getmembers() if any(w in m.name for w in wanted)]
        tar.extractall(directory, members=members, filter="data")
    return next(directory.glob("*/vendor/llama.cpp"))


def build_hf(directory: Path, arch: str, **config: Any) -> Path:
    """A random tiny HF model of ``arch`` (float32, ``config`` over the tiny defaults)
    saved into ``directory``."""
    import transformers

    torch.manual_seed(0)
    common: dict[str, Any] = {
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": VOCAB,
        "max_position_embeddings": 64, "tie_word_embeddings": False,
    }  # fmt: skip
    if arch == "qwen3":
        common["head_dim"] = 64
    common.update(_MOE.get(arch, {}), **config)
    cls = {**ARCHS, **MOE_ARCHS}[arch]
    config_cls = getattr(transformers, cls.replace("ForCausalLM", "Config"))
    model = getattr(transformers, cls)(config_cls(**common)).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
    model.save_pretrained(directory)
    return directory


def convert(llama_cpp: Path, hf: Path, out: Path) -> Path:
    """``convert_hf_to_gguf.py --outtype f32`` of ``hf`` into the file ``out``."""
    env = {**os.environ, "PYTHONPATH": str(llama_cpp / "gguf-py"), "NO_LOCAL_GGUF": ""}
    subprocess.run(
        [sys.executable, "-c", _CONVERT, str(hf), "--outtype", "f32", "--outfile", str(out)],
        cwd=llama_cpp, env=env, check=True, capture_output=True,
    )  # fmt: skip
    return out


def quantize(src: Path, out: Path, kind: str) -> Path:
    """``llama_model_quantize`` of the F32 GGUF ``src`` to ``kind`` (a key of FTYPES)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_{FTYPES[kind]}")
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({kind}) returned {rc}")
    return out


def transformers_state_dict(path: Path, config: Path | None = None) -> dict[str, torch.Tensor]:
    """transformers' own load of the GGUF file ``path`` (float32); with ``config`` (an HF
    model directory), into a model of that directory's config instead of the one
    transformers builds from the GGUF metadata (which has no expert sizes: MoE models
    get the config class's defaults)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = {} if config is None else {"config": AutoConfig.from_pretrained(config)}
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, **kwargs
    )
    return {k: v.detach() for k, v in model.state_dict().items()}
