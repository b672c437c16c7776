"""GGUF files through flexq: paths (file, split set, directory), HF names and config,
Q/K permutation, block-local reads, malformed files, load_state_dict and convert."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq.cli.main import main
from flexq.plan import TargetSlice
from flexq_format_gguf.checkpoint import GGUFCheckpoint, blocks_view
from flexq_format_gguf.decode import DECODERS
from flexq_format_gguf.layout import SCALE_FIELDS
from flexq_format_gguf.names import BLOCK, GLOBAL

Build = Callable[..., Path]
Reference = Callable[[Path], dict[str, np.ndarray]]
Convert = Callable[[Path], tuple[Path, dict[str, Any]]]
Write = Callable[[str, str, dict[str, tuple[np.ndarray, str]]], Path]

HF_OF = {**GLOBAL, **{f"blk.0.{k}.weight": f"model.layers.0.{v}.weight" for k, v in BLOCK.items()}}
HF_OF.update({f"blk.0.{k}.bias": f"model.layers.0.{v}.bias" for k, v in BLOCK.items()})


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype == np.float32
    assert a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_every_tensor_loads_by_its_hf_name_as_gguf_py_and_transformers_give_it(
    reference: Reference, build: Build, arch: str
) -> None:
    path = build(arch, "Q4_K")
    ref = reference(path)
    ct = flexq.compose(path)
    assert set(ct.logical_metadata()) == {HF_OF[name] for name in ref}
    for name, want in ref.items():
        same_bits(ct.load(HF_OF[name], "float32"), want)


def test_llama_q_and_k_rows_are_unpermuted_per_head(build: Build) -> None:
    """A row of q_proj's head h comes back where HF has it: rows (h, pair, half) of the
    GGUF tensor are HF rows (h, half, pair)."""
    path = build("llama", "F32")
    ct = flexq.compose(path)
    stored = ct.checkpoint.read("blk.0.attn_q.weight")
    q = ct.load("model.layers.0.self_attn.q_proj.weight", "float32")
    hd = 64
    for h, i in [(0, 0), (1, 5), (3, 31)]:
        np.testing.assert_array_equal(q[h * hd + i], stored[h * hd + 2 * i])
        np.testing.assert_array_equal(q[h * hd + hd // 2 + i], stored[h * hd + 2 * i + 1])
    # v is never permuted
    np.testing.assert_array_equal(
        ct.load("model.layers.0.self_attn.v_proj.weight", "float32"),
        ct.checkpoint.read("blk.0.attn_v.weight"),
    )


def test_config_json_is_built_from_the_metadata(build: Build) -> None:
    with flexq.compose(build("qwen3", "Q8_0")).checkpoint as ckpt:
        config = ckpt.config
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["model_type"] == "qwen3"
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]) == (
        256,
        512,
        1,
    )
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (
        4,
        2,
        64,
    )
    assert config["vocab_size"] == 32
    assert config["tie_word_embeddings"] is False


@pytest.mark.parametrize("weight_type", list(DECODERS))
def test_a_row_band_of_a_permuted_tensor_reads_only_its_heads_blocks(
    reference: Reference, build: Build, weight_type: str
) -> None:
    path = build("llama", weight_type)
    ref = reference(path)["blk.0.attn_q.weight"]
    ct = flexq.compose(path)
    key = "model.layers.0.self_attn.q_proj.weight"
    target = TargetSlice((256, 256), (60, 256), (50, 0), "float32")  # rows 50..110: heads 0, 1
    plan = ct.plan(key, target)
    sources = ct.read_sources(plan)
    info = ct.checkpoint.info("blk.0.attn_q.weight")
    # two heads of 64 rows, and the scale fields of their blocks (the checks' few bytes)
    blocks = ct.checkpoint.info(blocks_view("blk.0.attn_q.weight")).shape[1]
    scale_bytes = 2 * len(SCALE_FIELDS[weight_type][1]) * blocks
    assert ct.checkpoint.bytes_read == 128 * (info.shape[1] + scale_bytes)
    same_bits(np.asarray(ct.decode(key, sources, plan, "float32")), ref[50:110])


def test_a_split_set_loads_as_one_model_from_its_first_file_or_its_directory(
    reference: Reference, build: Build, tmp_path: Path
) -> None:
    whole = reference(build("llama", "Q6_K", name="whole.gguf"))
    split_dir = tmp_path / "split"
    split_dir.mkdir()
    build("llama", "Q6_K", name="split/m.gguf", split=4)
    files = sorted(p.name for p in split_dir.iterdir())
    assert files == [f"m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]  # 12 tensors, 4 a file
    for path in (split_dir / files[0], split_dir):
        ct = flexq.compose(path)
        assert ct.checkpoint.path == split_dir / files[0]
        for name, want in whole.items():
            same_bits(ct.load(HF_OF[name], "float32"), want)
    with pytest.raises(flexq.CheckpointError, match="is file 2 of a split set; pass the first"):
        flexq.compose(split_dir / files[1])
    (split_dir / files[2]).unlink()
    with pytest.raises(flexq.CheckpointError, match=f"lacks {files[2]}"):
        flexq.compose(split_dir)


def test_a_directory_with_two_gguf_models_is_refused_naming_them(
    build: Build, tmp_path: Path
) -> None:
    build("llama", "Q8_0", name="a.gguf")
    build("llama", "Q4_0", name="b.gguf")
    with pytest.raises(
        flexq.CheckpointError, match=r"holds 2 GGUF models \(a.gguf, b.gguf\); pass the file"
    ):
        flexq.compose(tmp_path)


def test_a_truncated_file_is_an_error_naming_it(build: Build, tmp_path: Path) -> None:
    path = build("llama", "Q8_0")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(
        flexq.CheckpointError, match=rf"{cut}: tensor .* lie past the end .* truncated"
    ):
        flexq.compose(cut)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + path.read_bytes()[4:])
    with pytest.raises(flexq.CheckpointError, match=rf"{bad}: not a GGUF file"):
        flexq.compose(bad)


def test_an_unsupported_ggml_type_is_named(build: Build, tmp_path: Path) -> None:
    path = build("llama", "Q8_0")
    data = bytearray(path.read_bytes())
    with GGUFCheckpoint([path]) as ckpt:
        assert isinstance(ckpt, GGUFCheckpoint)
        entry = ckpt.gguf["blk.0.attn_v.weight"]
    # The type id of attn_v's info: the uint32 before its offset (the last 12 bytes of its info).
    name = b"blk.0.attn_v.weight"
    at = data.index(name) + len(name) + 4 + 8 * 2  # rank, two dims
    assert int.from_bytes(data[at : at + 4], "little") == entry.type.id
    data[at : at + 4] = (16).to_bytes(4, "little")  # IQ2_XXS
    odd = tmp_path / "odd.gguf"
    odd.write_bytes(bytes(data))
    with pytest.raises(
        flexq.CheckpointError, match="'blk.0.attn_v.weight': ggml type IQ2_XXS is not decoded"
    ):
        flexq.compose(odd)


def test_an_unmapped_architecture_is_refused(write: Write) -> None:
    path = write(
        "g.gguf",
        "gpt2",
        {"token_embd.weight": (np.ones((4, 32), np.float32), "F32")},
    )
    with pytest.raises(flexq.FormatError, match="GGUF architecture 'gpt2' is not mapped"):
        flexq.compose(path)


def test_load_state_dict_fills_paddle_targets_by_hf_name(
    reference: Reference, build: Build
) -> None:
    import paddle

    path = build("qwen2", "Q5_K")
    ref = reference(path)
    keys = ["model.layers.0.self_attn.q_proj.bias", "model.layers.0.mlp.down_proj.weight"]
    targets = {
        "model.layers.0.self_attn.q_proj.bias": paddle.zeros([256], "float32"),
        "model.layers.0.mlp.down_proj.weight": paddle.zeros([256, 512], "float32"),
    }
    flexq.load_state_dict(targets, path)
    same_bits(targets[keys[0]].numpy(), ref["blk.0.attn_q.bias"])
    same_bits(targets[keys[1]].numpy(), ref["blk.0.ffn_down.weight"])


def test_convert_writes_a_plain_checkpoint_with_the_built_config(
    reference: Reference, build: Build, convert: Convert
) -> None:
    path = build("llama", "Q3_K")
    out, config = convert(path)
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_key_value_heads"] == 2
    ref = reference(path)
    ct = flexq.compose(out)
    for name, want in ref.items():
        same_bits(ct.load(HF_OF[name], "float32"), want)
    assert not any(p.name != "model.gguf" for p in path.parent.iterdir() if p.is_file())


def test_inspect_of_a_broken_gguf_is_one_line(
    build: Build, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.gguf"
    shutil.copyfile(build("llama", "Q8_0"), cut)
    cut.write_bytes(cut.read_bytes()[:40])
    assert main(["inspect", str(cut)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("flexq: error:")
    assert str(cut) in err[0]


def test_inspect_shows_the_ggml_type_of_each_tensor_and_the_metadata(
    build: Build, capsys: pytest.CaptureFixture[str]
) -> None:
    path = build("llama", "Q5_0")
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    types = {c["key"]: c["dtype"] for t in doc["tensors"] for c in t["components"]}
    assert types["blk.0.ffn_up.weight"] == "Q5_0"
    assert types["token_embd.weight"] == "F16"
    assert types["output_norm.weight"] == "F32"
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "GGUF v3, 1 file(s), 12 tensors" in out
    assert "general.architecture = llama" in out
    assert "llama.attention.head_count_kv = 2" in out


def test_verify_reports_a_gguf_models_coverage_and_decodes_it_deep(build: Build) -> None:
    report = flexq.verify(build("qwen3", "Q6_K"), deep=True)
    assert report.problems == []
    assert [(s.format, s.tensors) for s in report.summary] == [("gguf", 14)]
    assert len(report.deep) == 14
    assert all(row.nonfinite == 0 for row in report.deep)


def test_verify_of_an_unmapped_tensor_is_a_coverage_problem(write: Write) -> None:
    path = write(
        "m.gguf",
        "llama",
        {"blk.0.mystery.weight": (np.ones((2, 32), np.float32), "F32")},
    )
    report = flexq.verify(path)
    assert [p.kind for p in report.problems] == ["coverage"]
    assert "'blk.0.mystery.weight' has no Hugging Face name" in report.problems[0].message


def test_without_the_gguf_format_a_gguf_file_names_the_package(build: Build) -> None:
    import os
    import subprocess
    import sys

    path = build("llama", "Q8_0")
    env = {**os.environ, "FLEXQ_DISABLED_FORMATS": "gguf"}
    cli = [sys.executable, "-m", "flexq.cli", "inspect", str(path)]
    done = subprocess.run(cli, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"flexq: error: {path}: is a GGUF file: install flexq-format-gguf to read it"
    )


@pytest.mark.parametrize("weight_type", ["Q4_K", "F16"])
def test_decoding_in_bands_of_whole_heads_gives_the_same_bits(
    reference: Reference, build: Build, weight_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flexq_format_gguf.layout

    path = build("llama", weight_type)
    ref = reference(path)
    monkeypatch.setattr(flexq_format_gguf.layout, "BAND_BYTES", 3 * 256 * 4)  # 3 rows a band
    ct = flexq.compose(path)
    for key, name in [("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"),
                      ("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight")]:  # fmt: skip
        same_bits(ct.load(key, "float32"), ref[name])
        target = TargetSlice(ref[name].shape, (50, 40), (37, 100), "float32")
        plan = ct.plan(key, target)
        box = np.asarray(ct.decode(key, ct.read_sources(plan), plan, "float32"))
        same_bits(box, ref[name][37:87, 100:140])
