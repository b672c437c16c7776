"""Builders of tiny quantized checkpoints, one function per producer scheme.

Each builder quantizes the tiny base model of :mod:`interop.producers.base` with a
real producer library on CPU, saves it with that producer's own save path, and
returns a :class:`~interop.producers.base.Built`: the checkpoint directory, the
producer's own float32 dequantization of every quantized Linear (keyed by the
logical ``[out, in]`` weight name) and the tensors it left unquantized.
"""
