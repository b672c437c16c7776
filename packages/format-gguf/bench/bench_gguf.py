"""Decode throughput of every GGUF block type next to a memcpy of the same output bytes,
and the memory of a 1 GiB Q4_K_M load.

Run ``python packages/format-gguf/bench/bench_gguf.py`` (or ``nox -s bench``, which calls
:func:`measure` and :func:`measure_memory`). :func:`measure` writes one GGUF file (gguf-py's
writer) holding a ``rows x cols`` tensor of every block type (random blocks, finite scales),
composes it with the gguf format and times the dequantize of each tensor whole, as a load
does (:func:`flexq.testing.throughput.measure_checkpoints`: sources read once, no file I/O
in the timed part, outputs written before): into float32 (``gguf_<type>``) and into
bfloat16 through a float32 work array (``gguf_<type>_bf16``, GB/s of float32-sized
output), beside ``np.copyto`` of the same float32 bytes, in alternating rounds, medians.

:func:`measure_memory` writes a llama-layout GGUF file with gguf-py's writer whose
tensors are 1 GiB as float32 (the dtype Paddle targets get by default): Q4_K linears and
embedding, a Q6_K ``output.weight`` (as llama.cpp's Q4_K_M preset mixes them), F32
norms, random valid blocks (finite float16 scales: the decode costs what a quantized
model's does). A fresh process then allocates and writes float32 Paddle targets under
the HF names, and times one default ``flexq.load_state_dict(targets, path)`` with
:class:`bench.fresh.Measured` (peak RSS above the targets: VmHWM minus the RSS after
allocation, the file's mapped pages counted), against 1.25x the largest tensor.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the workspace root: bench.fresh

from flexq.testing.throughput import measure_checkpoints, report
from flexq_format_gguf.decode import DECODERS, decode_rows
from flexq_format_gguf.ggml import BY_NAME
from flexq_format_gguf.names import BLOCK, GLOBAL

#: A 7B-model projection's row length; rows chosen for a 32 MB float32 output.
ROWS, COLS = 2048, 4096


def _blocks(rng: np.random.Generator, name: str, rows: int, cols: int) -> np.ndarray:
    t = BY_NAME[name]
    raw = rng.integers(0, 256, (rows * cols // t.block, t.nbytes), dtype=np.uint8)
    # Bit 6 clear in every byte: no float16 scale has an all-ones exponent (inf/NaN).
    return (raw & 0xBF).reshape(rows, -1)


def measure(rows: int = ROWS, cols: int = COLS, rounds: int = 5) -> dict[str, float]:
    """GB/s of float32 output for each block type, float32 (``gguf_<type>_gbps``) and
    bfloat16 out (``gguf_<type>_bf16_gbps``), and for a memcpy of the same bytes
    (``memcpy_gbps``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path, keys = write_types(Path(tmp) / "types.gguf", rows, cols)
        cases = {f"gguf_{name}": (path, key) for name, key in keys.items()}
        return measure_checkpoints("gguf", cases, rounds)


def write_types(path: Path, rows: int, cols: int) -> tuple[Path, dict[str, str]]:
    """A llama-layout GGUF file at ``path`` whose layer i's ``ffn_down`` is a ``rows x
    cols`` tensor of the i-th block type (random blocks, finite scales; not permuted:
    whole rows decode in place), and block type -> the HF name it loads under."""
    import gguf

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    _llama_metadata(w, {**LLAMA_1G, "num_hidden_layers": len(DECODERS)})
    keys = {}
    for i, name in enumerate(DECODERS):
        raw = _blocks(rng, name, rows, cols)
        w.add_tensor(f"blk.{i}.ffn_down.weight", raw, raw_dtype=gguf.GGMLQuantizationType[name])
        keys[name] = f"model.layers.{i}.{BLOCK['ffn_down']}.weight"
    _finish(w)
    return path, keys


#: A TinyLlama-shaped model of 3 layers: 263M values, 0.98 GiB as float32; the largest
#: tensors are the 32000 x 2048 embedding and output (250 MiB each as float32).
LLAMA_1G = {
    "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 3,
    "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
}  # fmt: skip
#: The default memory bound: peak RSS above the targets within this many largest tensors.
BOUND = 1.25


def llama_tensors(config: dict[str, int]) -> dict[str, tuple[str, tuple[int, ...], str]]:
    """GGUF name -> (HF name, numpy shape, ggml type) of a Q4_K_M-like llama model."""
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * h // config["num_attention_heads"]
    out = {
        "token_embd.weight": (GLOBAL["token_embd.weight"], (v, h), "Q4_K"),
        "output_norm.weight": (GLOBAL["output_norm.weight"], (h,), "F32"),
        "output.weight": (GLOBAL["output.weight"], (v, h), "Q6_K"),
    }
    parts = {
        "attn_norm": (h,), "ffn_norm": (h,), "attn_q": (h, h), "attn_k": (kv, h),
        "attn_v": (kv, h), "attn_output": (h, h), "ffn_gate": (f, h), "ffn_up": (f, h),
        "ffn_down": (h, f),
    }  # fmt: skip
    for n in range(config["num_hidden_layers"]):
        for part, shape in parts.items():
            hf = f"model.layers.{n}.{BLOCK[part]}.weight"
            out[f"blk.{n}.{part}.weight"] = (hf, shape, "F32" if len(shape) == 1 else "Q4_K")
    return out


def write_model(path: Path, config: dict[str, int] = LLAMA_1G) -> Path:
    """The GGUF file of :func:`llama_tensors` at ``path``, random valid blocks."""
    import gguf

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    _llama_metadata(w, config)
    for name, (_, shape, type_name) in llama_tensors(config).items():
        if type_name == "F32":
            w.add_tensor(name, np.ones(shape, np.float32))
        else:
            raw = _blocks(rng, type_name, *shape)
            w.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType[type_name])
    _finish(w)
    return path


def _llama_metadata(w: Any, config: dict[str, int]) -> None:
    """The llama hyperparameters of ``config`` on gguf-py writer ``w``."""
    w.add_block_count(config["num_hidden_layers"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_context_length(2048)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(config["vocab_size"])


def _finish(w: Any) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _memory_child(path: str, config: dict[str, int]) -> dict[str, Any]:
    """In a fresh process: float32 targets, then one default load, measured; then the
    first rows of the embedding and output checked against the decoder on the file's
    blocks (the load filled the targets)."""
    import gguf
    import paddle

    from bench.fresh import Measured

    tensors = llama_tensors(config)
    shapes = {hf: shape for hf, shape, _ in tensors.values()}
    targets = {hf: paddle.zeros(list(shape), dtype="float32") for hf, shape in shapes.items()}
    import flexq

    with Measured() as m:
        report = flexq.load_state_dict(targets, path)
    stored = {t.name: t for t in gguf.GGUFReader(path).tensors}
    for name in ("token_embd.weight", "output.weight"):
        hf, _, type_name = tensors[name]
        expected = decode_rows(type_name, np.asarray(stored[name].data[:8])).reshape(8, -1)
        if not np.array_equal(targets[hf].numpy()[:8], expected):
            raise AssertionError(f"{hf} does not hold the decoded {name}")
    largest = max(int(np.prod(s)) * 4 for s in shapes.values())
    return {
        **m.figures(),
        "rss_after_targets": m.before["VmRSS"],
        "targets_bytes": sum(int(np.prod(s)) * 4 for s in shapes.values()),
        "largest_tensor_bytes": largest,
        "bound_bytes": int(BOUND * largest),
        "engine": report.engine,
        "bytes_read": report.bytes_read,
    }


def measure_memory(
    config: dict[str, int] = LLAMA_1G, workdir: Path | None = None
) -> dict[str, Any]:
    """Figures of one default load of the Q4_K_M file of ``config`` (1 GiB of float32)
    in a fresh process: peak RSS above the targets (``peak_extra_rss``), the bound
    (``bound_bytes``), ``within_bound``."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        path = write_model(Path(tmp) / "llama-q4_k_m.gguf", config)
        proc = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(path), json.dumps(config)],
            cwd=Path(__file__).resolve().parents[3],
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"gguf memory child failed:\n{proc.stderr[-3000:]}")
        figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        figures["file_bytes"] = path.stat().st_size
    figures["within_bound"] = figures["peak_extra_rss"] <= figures["bound_bytes"]
    return figures


def main() -> None:
    title = f"gguf dequantize, {ROWS}x{COLS} -> {ROWS * COLS * 4 / 1e6:.0f} MB of float32"
    print(report(title, measure()))
    m = measure_memory()
    mib = 1 << 20
    print(
        f"gguf Q4_K_M load, {m['targets_bytes'] / mib:.0f} MiB float32 targets from a "
        f"{m['file_bytes'] / mib:.0f} MiB file: peak RSS above targets "
        f"{m['peak_extra_rss'] / mib:.1f} MiB, bound {m['bound_bytes'] / mib:.1f} MiB "
        f"(1.25x {m['largest_tensor_bytes'] / mib:.0f} MiB), {m['seconds']:.2f} s, "
        f"within bound: {m['within_bound']}"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--memory-child"]:
        print(json.dumps(_memory_child(sys.argv[2], json.loads(sys.argv[3]))))
    else:
        main()
