"""Session fixtures: the tiny base model and one freshly built checkpoint per scheme."""

from __future__ import annotations

from pathlib import Path

import pytest

from .producers.base import build_base
from .schemes import BY_NAME, SCHEMES, Product


@pytest.fixture(scope="session")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The random bfloat16 tiny Llama every producer quantizes."""
    return build_base(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="session")
def build(base_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Product]:
    """Scheme name -> its product, filled on first use (each checkpoint built once)."""
    return {}


def product_of(
    name: str, built: dict[str, Product], base: Path, tmp: pytest.TempPathFactory
) -> Product:
    """The product of scheme ``name``, built on first use."""
    if name not in built:
        scheme = BY_NAME[name]
        built[name] = Product(scheme, scheme.build(base, tmp.mktemp(scheme.name)))
    return built[name]


@pytest.fixture(scope="session")
def product(
    request: pytest.FixtureRequest,
    build: dict[str, Product],
    base_model: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Product:
    """The checkpoint of the scheme named by the test's ``product`` parameter (built once)."""
    return product_of(request.param, build, base_model, tmp_path_factory)


@pytest.fixture(scope="session")
def every_product(
    build: dict[str, Product], base_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> list[Product]:
    """Every scheme's checkpoint (for tests about the whole table)."""
    return [product_of(s.name, build, base_model, tmp_path_factory) for s in SCHEMES]
