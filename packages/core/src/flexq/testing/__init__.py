"""Helpers for format authors' tests, and the conformance suite every format runs.

- :class:`FormatConformance`: subclass it in a format's tests (three class names) and
  pytest runs the checks the core promises of every format (:mod:`.conformance`);
- :func:`decode_box`, :func:`decode_into_target`, :func:`source_to_paddle`,
  :func:`local_and_whole`, :func:`check_local_box`, :func:`planned_box`: decode one box
  of a logical tensor as a load does, with numpy or Paddle sources, or into an array
  standing for a host target's memory (a bfloat16 target's as ``BoxSources.rounded_out``),
  or beside the slice of the whole tensor with the bytes read, or check a box's plan,
  read count and bits at once, or its bits and hand back its reads (:mod:`.boxes`);
- :func:`round_to`, :func:`same_bits`, :func:`same_bfloat16`, :func:`load_script`,
  :func:`helpers`, :func:`fixture_of`, :func:`write_checkpoint`: the oracle's one
  rounding, bit equality (of bfloat16 bits too, NaN payloads aside), a bench script
  imported by path, a conftest's oracle functions as one fixture or each as its own,
  the checkpoint writer a ``build`` fixture hands out (:mod:`.oracles`);
- :mod:`.strategies` (hypothesis: ``box_in``, ``box_case``, ``examples``) and
  :mod:`.throughput` (the benches' one timing loop: float32 and bfloat16 decodes of
  bench cases or checkpoints beside a memcpy of the same bytes, alternating rounds,
  medians) are imported by their module name;
- :func:`check_conformance`, :func:`scale_like`: plans declare every scale they read
  (:mod:`.plans`; also in :mod:`flexq.formatkit`);
"""

from __future__ import annotations

from flexq.testing.boxes import (
    check_local_box,
    decode_box,
    decode_into_target,
    local_and_whole,
    planned_box,
    source_to_paddle,
)
from flexq.testing.conformance import FormatConformance
from flexq.testing.oracles import (
    fixture_of,
    helpers,
    load_script,
    round_to,
    same_bfloat16,
    same_bits,
    write_checkpoint,
)
from flexq.testing.plans import check_conformance, scale_like

__all__ = [
    "FormatConformance",
    "check_conformance",
    "check_local_box",
    "decode_box",
    "decode_into_target",
    "fixture_of",
    "helpers",
    "load_script",
    "local_and_whole",
    "planned_box",
    "round_to",
    "same_bfloat16",
    "same_bits",
    "scale_like",
    "source_to_paddle",
    "write_checkpoint",
]
