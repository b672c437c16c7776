"""flexq's benchmark suite: ``python bench/run.py`` or ``nox -s bench``.

One module per job: :mod:`bench.timing` (alternating rounds, medians),
:mod:`bench.checkpoints` (the checkpoints every comparison shares),
:mod:`bench.formats` (each format package's own dequantize bench),
:mod:`bench.vs_dcp` (torch DCP), :mod:`bench.vs_paddle` (Paddle's loader on bf16),
:mod:`bench.fresh` (the defaults, one load per fresh process, vs DCP and memcpy;
the scale series; the cold start),
:mod:`bench.ranks` (bytes read per rank with 2 ranks), :mod:`bench.hotspots`
(where the time goes) and :mod:`bench.report` (JSON, chart, docs/performance.md).
"""
