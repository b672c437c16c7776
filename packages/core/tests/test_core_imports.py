"""What ``import flexq`` and entry-point discovery cost a fresh process: the format kit's
pydantic half is imported only when a format first asks for it, and config models are
built only when first used."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"import sys; {code}; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_importing_flexq_does_not_import_pydantic() -> None:
    assert "pydantic" not in _modules_after("import flexq, flexq.formatkit")


def test_the_config_names_still_come_from_the_format_kit() -> None:
    from flexq import formatkit
    from flexq.formatkit import config

    assert formatkit.QuantConfig is config.QuantConfig
    assert formatkit.parse_quant_config is config.parse_quant_config
    assert formatkit.natural_dtype is config.natural_dtype
    assert "pydantic" in _modules_after("from flexq.formatkit import QuantConfig")


def test_a_format_config_model_is_built_on_first_validation_not_at_import() -> None:
    from flexq.formatkit import QuantConfig

    class Bits(QuantConfig):
        bits: int

    # Every installed format's models are defined when discovery imports its plugin;
    # only those of the formats a checkpoint uses are ever built.
    assert not Bits.__pydantic_complete__
    assert Bits.model_validate({"bits": 4, "extra": 1}).bits == 4
    assert Bits.__pydantic_complete__
