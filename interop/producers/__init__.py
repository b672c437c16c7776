"""Builders of tiny quantized checkpoints, one function per producer scheme.

Each builder quantizes the tiny base model of :mod:`interop.producers.base` with a
real producer library on CPU, saves it with that producer's own save path, and
returns a :class:`~interop.producers.base.Built`: the checkpoint directory, the
producer's own float32 dequantization of every quantized Linear (keyed by the
logical ``[out, in]`` weight name) and the tensors it left unquantized.

Not producible on CPU (so not built here):

- transformers' own FP8 (``FineGrainedFP8Config``): its quantizer's
  ``validate_environment`` raises "No GPU or XPU found. A GPU or XPU is needed
  for FP8 quantization."
- transformers' own MXFP4 quantization (``Mxfp4Config``): ``quantize_to_mxfp4``
  needs ``triton_kernels`` from the hub; the gpt-oss expert test therefore uses
  random blocks with transformers' ``convert_moe_packed_tensors`` as the oracle.
- compressed-tensors W4A16 act-order with ``weight_g_idx``: compressed-tensors
  0.19 removed ``actorder="group"`` (see :mod:`.llmcompressor_schemes`).
"""
