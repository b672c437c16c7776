"""The shared numerics below the plugin layer: arrays, rounding, scales, exact ops, bands
and threads, element tables, and the :class:`Sources` a decode step reads.

For the core (the load path, composition, pass-through and checks import from here)
and, through the re-exports of :mod:`flexq.formatkit`, for format authors. Nothing in
this package imports :mod:`flexq.formatkit` or :mod:`flexq.plugin`.
"""
