"""Decode throughput of every GGUF block type next to a memcpy of the same output bytes.

Run ``python packages/format-gguf/bench/bench_gguf.py`` (or ``nox -s bench``, which calls
:func:`measure`). Times :func:`flexq_format_gguf.decode.decode_rows` on in-memory
random blocks (finite scales; no file I/O) of a ``rows x cols`` tensor to float32, and
``np.copyto`` of the same float32 bytes, in alternating rounds (:mod:`bench.timing`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the workspace root: bench.timing

from bench.timing import alternate, median
from flexq_format_gguf.decode import DECODERS, decode_rows
from flexq_format_gguf.ggml import BY_NAME

#: A 7B-model projection's row length; rows chosen for a 32 MB float32 output.
ROWS, COLS = 2048, 4096


def _blocks(rng: np.random.Generator, name: str, rows: int, cols: int) -> np.ndarray:
    t = BY_NAME[name]
    raw = rng.integers(0, 256, (rows * cols // t.block, t.nbytes), dtype=np.uint8)
    # Bit 6 clear in every byte: no float16 scale has an all-ones exponent (inf/NaN).
    return (raw & 0xBF).reshape(rows, -1)


def measure(rows: int = ROWS, cols: int = COLS, rounds: int = 5) -> dict[str, float]:
    """GB/s of float32 output for each block type (``gguf_<type>_gbps``) and for a memcpy
    of the same bytes (``memcpy_gbps``)."""
    rng = np.random.default_rng(0)
    out_bytes = rows * cols * 4
    src, dst = np.ones((rows, cols), np.float32), np.ones((rows, cols), np.float32)
    contenders = {"memcpy": lambda: lambda: np.copyto(dst, src)}
    for name in DECODERS:
        raw = _blocks(rng, name, rows, cols)
        contenders[name] = lambda raw=raw, name=name: lambda: decode_rows(name, raw)
    times = alternate(contenders, rounds)
    figures = {f"gguf_{n}_gbps": out_bytes / median(times[n]) / 1e9 for n in DECODERS}
    figures["memcpy_gbps"] = out_bytes / median(times["memcpy"]) / 1e9
    return figures


def main() -> None:
    print(f"gguf decode, {ROWS}x{COLS} -> float32 ({ROWS * COLS * 4 / 1e6:.0f} MB)")
    for name, value in measure().items():
        print(f"  {name:24s} {value:6.2f} GB/s")


if __name__ == "__main__":
    main()
