"""Helpers for format authors' tests, and the conformance suite every format runs.

- :class:`FormatConformance`: subclass it in a format's tests (three class names) and
  pytest runs the checks the core promises of every format (:mod:`.conformance`);
- :func:`decode_box`, :func:`source_to_paddle`, :func:`local_and_whole`: decode one box
  of a logical tensor as a load does, with numpy or Paddle sources, or beside the
  slice of the whole tensor with the bytes read (:mod:`.boxes`);
- :func:`round_to`, :func:`same_bits`, :func:`load_script`, :func:`helpers`: the oracle's
  one rounding, bit equality, a bench script imported by path, a conftest's oracle
  functions as one fixture (:mod:`.oracles`);
- :func:`check_conformance`, :func:`scale_like`: plans declare every scale they read
  (:mod:`.plans`; also in :mod:`flexq.formatkit`);
- :func:`decode_runs`, :func:`dequantizer`, :func:`memcpy`, :func:`alternating_gbps`: a
  tensor's (or one box's) decode into float32 and bfloat16 and the memcpy baseline, ready
  to time, and their GB/s from
  alternating rounds, for the format packages' benches (:mod:`.timing`).
"""

from __future__ import annotations

from flexq.testing.boxes import decode_box, local_and_whole, source_to_paddle
from flexq.testing.conformance import FormatConformance
from flexq.testing.oracles import helpers, load_script, round_to, same_bits
from flexq.testing.plans import check_conformance, scale_like
from flexq.testing.timing import alternating_gbps, decode_runs, dequantizer, memcpy

__all__ = [
    "FormatConformance",
    "alternating_gbps",
    "check_conformance",
    "decode_box",
    "decode_runs",
    "dequantizer",
    "helpers",
    "load_script",
    "local_and_whole",
    "memcpy",
    "round_to",
    "same_bits",
    "scale_like",
    "source_to_paddle",
]
