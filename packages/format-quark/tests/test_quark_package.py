"""The package as installed: its entry point, its ``flexq list-formats`` row, the conformance
check of its read plans, and the published-methods table that names it."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from typing import Any

import numpy as np
import pytest

import flexq
import flexq_format_quark
import flexq_format_quark.plugin
from flexq import compose
from flexq.cli import main
from flexq.formatkit import check_conformance
from flexq.plugin.known import PUBLISHED


def test_entry_point_quark_resolves_to_the_plugin_object() -> None:
    (ep,) = [e for e in entry_points(group="flexq") if e.name == "quark"]
    assert ep.load() is flexq_format_quark.plugin.plugin
    assert ep.dist is not None
    assert ep.dist.name == "flexq-format-quark"


def test_list_formats_json_has_the_quark_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list-formats", "--json"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "quark"]
    assert row["version"] == flexq_format_quark.__version__ == "0.1.0"
    assert row["distribution"] == "flexq-format-quark"
    assert row["description"].startswith("AMD Quark exports")


def test_published_table_names_the_quark_method_for_this_distribution() -> None:
    (info,) = [i for i in flexq.list_formats() if i.name == "quark"]
    assert info.methods == ("quark",)
    assert PUBLISHED["quark"] == (("quark", "flexq-format-quark"),)


@pytest.mark.parametrize("kind", ["fp8-tensor", "fp8-channel", "int4-group", "mxfp4"])
def test_read_plans_declare_every_scale_and_zero_point(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator, kind: str
) -> None:
    lin = oracle.Linear(rng, kind, 16, 64)
    ct = compose(write_checkpoint(lin.raw(), oracle.quark_config(oracle.SPECS[kind])), ["quark"])
    check_conformance(ct, ["quark"])  # raises PluginError on an undeclared scale-like read


@pytest.mark.parametrize("kind", ["fp8-tensor", "int4-group", "mxfp4"])
def test_without_the_format_a_quark_checkpoint_is_refused_naming_the_package(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator, kind: str
) -> None:
    lin = oracle.Linear(rng, kind, 16, 64)
    path = write_checkpoint(lin.raw(), oracle.quark_config(oracle.SPECS[kind]))
    with pytest.raises(flexq.FlexqError, match=r"quark.*flexq-format-quark"):
        compose(path, ["fp8"])
