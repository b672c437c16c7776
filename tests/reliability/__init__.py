"""Helpers of the reliability catalogue: checkpoint builders, file surgery, a faulty plugin."""
