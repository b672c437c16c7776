"""The claimed config methods against real producers' checkpoints.

Every (method, format) pair a format claims (its ``flexq_quant_methods``) or
``flexq.plugin.known.PUBLISHED`` lists must be written by some producer scheme of
:data:`interop.schemes.SCHEMES` whose checkpoint that format decodes, unless
:data:`NO_CPU_PRODUCER` says why no producer can write it on CPU; and every method a
producer's checkpoint names must be claimed by the scheme's format in both places.
So a claim with no producer case fails, and so does a producer method no format
claims (the compressed-tensors ``mxfp8-quantized`` regression of issue 25).
"""

from __future__ import annotations

import flexq
from flexq.plugin.known import PUBLISHED, config_methods

from .producers.base import quantization_config
from .schemes import SCHEMES, Product
from .test_interop import every_scheme

#: (method, format) pairs claimed with no producer that writes them on CPU, and why.
NO_CPU_PRODUCER: dict[tuple[str, str], str] = {
    ("fp8", "fp8"): "transformers' FineGrainedFP8Config: 'No GPU or XPU found'",
    ("fbgemm_fp8", "fp8"): "transformers' FbgemmFp8Config needs fbgemm-gpu on CUDA",
    ("mxfp4", "mxfp4"): (
        "transformers' Mxfp4Config quantizer needs triton_kernels from the hub; "
        "test_gpt_oss_mxfp4 checks transformers' own dequantizer on packed blocks"
    ),
    ("intel/auto-round", "gptq"): "auto-round before 0.5's spelling; 0.15.1 writes auto-round",
}


def claimed_pairs() -> set[tuple[str, str]]:
    """(method, format) for every method an installed format or PUBLISHED claims."""
    pairs = {(m, fmt) for m, owners in PUBLISHED.items() for fmt, _ in owners}
    for info in flexq.list_formats():
        if info.error is None:
            pairs |= {(m, info.name) for m in info.methods}
    return pairs


def produced_pairs(products: list[Product]) -> set[tuple[str, str]]:
    """(method, format) for every method a producer's checkpoint names."""
    return {
        (m, p.scheme.fmt)
        for p in products
        for m in config_methods(quantization_config(p.built.path))
    }


def test_every_claimed_method_has_a_producer_checkpoint(every_product: list[Product]) -> None:
    assert len(every_product) == len(SCHEMES)
    produced = produced_pairs(every_product)
    missing = sorted(claimed_pairs() - produced - set(NO_CPU_PRODUCER))
    assert not missing, f"claimed (method, format) with no producer scheme: {missing}"
    stale = sorted(set(NO_CPU_PRODUCER) & produced)
    assert not stale, f"NO_CPU_PRODUCER lists pairs a scheme now writes: {stale}"
    unknown = sorted(set(NO_CPU_PRODUCER) - claimed_pairs())
    assert not unknown, f"NO_CPU_PRODUCER lists pairs nothing claims: {unknown}"


@every_scheme
def test_the_producers_methods_are_claimed_by_its_format(product: Product) -> None:
    fmt = product.scheme.fmt
    methods = config_methods(quantization_config(product.built.path))
    assert methods, f"{product.scheme.name}: the checkpoint's config names no method"
    published = sorted(m for m in methods if fmt not in {f for f, _ in PUBLISHED.get(m, ())})
    assert not published, f"PUBLISHED does not list format {fmt!r} for {published}"
    info = {i.name: i for i in flexq.list_formats()}.get(fmt)
    if info is not None and info.error is None:
        unclaimed = sorted(methods - set(info.methods))
        assert not unclaimed, f"format {fmt!r} does not claim {unclaimed}"
