"""Session fixtures: the tiny base model and one freshly built checkpoint per scheme."""

from __future__ import annotations

from pathlib import Path

import pytest

from .producers.base import build_base
from .schemes import BY_NAME, Product


@pytest.fixture(scope="session")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The random bfloat16 tiny Llama every producer quantizes."""
    return build_base(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="session")
def product(
    request: pytest.FixtureRequest, base_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Product:
    """The checkpoint of the scheme named by the test's ``product`` parameter (built once)."""
    scheme = BY_NAME[request.param]
    return Product(scheme, scheme.build(base_model, tmp_path_factory.mktemp(scheme.name)))
