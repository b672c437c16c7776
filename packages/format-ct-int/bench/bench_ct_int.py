"""Dequantize throughput of the ct-int format next to a numpy memcpy of the same output bytes.

Run ``python bench_ct_int.py`` (or ``nox -s bench``). Builds 4096 x 4096
linears in temporary checkpoints -- W4A16 group 128 symmetric and asymmetric
(pack-quantized), W8A16 and W3A16 (codes crossing words) group 128
(pack-quantized) and W8A8 per channel
(int-quantized) -- reads their components once, then times the CPU dequantize
to float32 and ``np.copyto`` of an equally large float32 array, both into
outputs written before, alternating, median of 5.
"""

from __future__ import annotations

import tempfile

import numpy as np

from flexq.testing.throughput import measure_checkpoints, report
from flexq_ct_int import WeightScheme, save_ct_int_checkpoint

OUT_FEATURES = 4096
IN_FEATURES = 4096
ROUNDS = 5
SCHEMES = {
    "w4a16": WeightScheme(bits=4, strategy="group", group_size=128),
    "w4a16_asym": WeightScheme(bits=4, strategy="group", group_size=128, symmetric=False),
    "w8a16": WeightScheme(bits=8, strategy="group", group_size=128),
    "w3a16": WeightScheme(bits=3, strategy="group", group_size=128),
    "w8a8": WeightScheme(fmt="int-quantized", bits=8, strategy="channel"),
}


def measure() -> dict[str, float]:
    """GB/s of float32 output: dequantize per scheme and np.copyto of the same bytes."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((OUT_FEATURES, IN_FEATURES)).astype(np.float32) * 0.02
    with tempfile.TemporaryDirectory() as tmp:
        checkpoints = {
            f"ct_int_{name}": (
                save_ct_int_checkpoint(f"{tmp}/{name}", {"fc.weight": w}, scheme),
                "fc.weight",
            )
            for name, scheme in SCHEMES.items()
        }
        return measure_checkpoints("ct-int", checkpoints, ROUNDS)


def main() -> None:
    """Print the figures of :func:`measure`."""
    title = f"ct-int dequantize {OUT_FEATURES}x{IN_FEATURES}, {len(SCHEMES)} schemes"
    print(report(f"{title} (median of {ROUNDS})", measure()))


if __name__ == "__main__":
    main()
