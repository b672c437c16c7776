"""The benchmark script runs and reports the figures `nox -s bench` reads."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from flexq_format_gguf.decode import DECODERS

BENCH = Path(__file__).parents[1] / "bench" / "bench_gguf.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_gguf", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_measure_reports_every_block_type_into_float32_and_bfloat16_and_memcpy() -> None:
    module = _bench()
    figures = module.measure(rows=4, cols=256, rounds=1)
    cases = {f"gguf_{n}{out}_gbps" for n in DECODERS for out in ("", "_bf16")}
    assert set(figures) == cases | {"memcpy_gbps"}
    assert all(v > 0 for v in figures.values())


def test_the_timed_file_loads_every_block_type_as_gguf_py_dequantizes_it(
    tmp_path: Path, dequantize_ref: Callable[[np.ndarray, str], np.ndarray]
) -> None:
    """What the bench times is a real load's decode: each type's tensor, composed with the
    gguf format under its HF name, equals gguf-py's dequantize of the file's blocks."""
    import gguf

    from flexq import compose
    from flexq.plan import TargetSlice

    path, keys = _bench().write_types(tmp_path / "types.gguf", 4, 512)
    stored = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(path)).tensors}
    ct = compose(path, ["gguf"])
    try:
        for i, (name, key) in enumerate(keys.items()):
            plan = ct.plan(key, TargetSlice.whole((4, 512), "float32"))
            out = np.zeros((4, 512), np.float32)
            ct.decode(key, ct.read_sources(plan), plan, "float32", out=out)
            ref = dequantize_ref(stored[f"blk.{i}.ffn_down.weight"], name)
            np.testing.assert_array_equal(out.view(np.uint32), ref.view(np.uint32))
    finally:
        ct.checkpoint.close()


def test_memory_case_loads_a_q4_k_m_llama_in_a_fresh_process_and_reports_the_bound() -> None:
    module = _bench()
    config = {
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024,
    }  # fmt: skip
    types = {t for _, _, t in module.llama_tensors(config).values()}
    assert types == {"Q4_K", "Q6_K", "F32"}
    figures = module.measure_memory(config)  # the child checks the loaded values
    embedding = 1024 * 256 * 4  # the embedding and the output, the largest tensors
    assert figures["largest_tensor_bytes"] == embedding
    assert figures["bound_bytes"] == int(1.25 * embedding)
    linears = 2 * 256 * 256 + 2 * 128 * 256 + 3 * 512 * 256  # q, o; k, v; gate, up, down
    assert figures["targets_bytes"] == 2 * embedding + 4 * (3 * 256 + linears)
    assert figures["bytes_read"] > 0
    assert figures["within_bound"] == (figures["peak_extra_rss"] <= figures["bound_bytes"])
