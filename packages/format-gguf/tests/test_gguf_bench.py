"""The benchmark script runs and reports the figures `nox -s bench` reads."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from flexq_format_gguf.decode import DECODERS

BENCH = Path(__file__).parents[1] / "bench" / "bench_gguf.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_gguf", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_measure_reports_every_block_type_and_memcpy_throughput() -> None:
    module = _bench()
    figures = module.measure(rows=4, cols=256, rounds=1)
    assert set(figures) == {f"gguf_{n}_gbps" for n in DECODERS} | {"memcpy_gbps"}
    assert all(v > 0 for v in figures.values())


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
