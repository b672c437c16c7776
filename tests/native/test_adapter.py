"""The composition and the thin Paddle adapter around it.

flexq's own engines take the immutable :class:`flexq.Composition`; only Paddle's loader
(``engine="native"``, or a user handing ``flexq.compose(path)`` to Paddle) gets a
:class:`flexq.ComposedTransform`, which holds a composition and keeps the protocol's
per-call state itself. Each (logical key, box) is planned once per load: a forced global
plan and the native engine's validation ask the format no second time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import paddle
import pytest
from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd
from paddle.distributed.flex_checkpoint.dcp.metadata import LocalTensorMetadata

import flexq
from flexq.compose import composition_of
from flexq.composition import Composition
from flexq.load import api
from flexq.load.engine import choose
from flexq.transform import ComposedTransform

from ..conftest import NORM, CountedPlans

if TYPE_CHECKING:
    from .conftest import Loader

#: the methods Paddle's loader calls, and the adapter's own API beside them.
PROTOCOL = {"logical_metadata", "source_keys", "read_plan", "read_plan_for", "apply", "declaring"}
KEY = "lin.weight"
WHOLE = flexq.TargetSlice.whole((8, 8), "float32")


def test_compose_returns_an_adapter_holding_a_composition_and_forwarding_it(
    int8row_ckpt: Path,
) -> None:
    """Code written against ``compose()``'s result (``entries``, ``checkpoint``, ``plan``,
    ``load`` ...) reads the composition the adapter holds; the composition has none of
    the protocol."""
    ct = flexq.compose(int8row_ckpt)
    comp = ct.composition
    assert type(comp) is Composition
    assert not isinstance(ct, Composition)
    assert not PROTOCOL & set(dir(Composition))
    assert (ct.entries, ct.checkpoint, ct.problems, ct.formats) == (
        comp.entries,
        comp.checkpoint,
        comp.problems,
        comp.formats,
    )
    assert ct.entries is comp.entries
    assert ct.entry(NORM) is comp.entry(NORM)
    key = next(k for k, e in ct.entries.items() if not e.is_passthrough)
    np.testing.assert_array_equal(ct.load(key, "bfloat16"), comp.load(key, "bfloat16"))
    box = flexq.TargetSlice(ct.entry(key).shape, (32, 64), (32, 0), "float32")
    assert ct.plan(key, box) == comp.plan(key, box)


def test_declaring_is_a_view_over_the_same_composition(int8row_ckpt: Path) -> None:
    """The view shares the composition (nothing is composed again) and starts with no
    plans of its own; the dtypes it declares stay in the view."""
    ct = flexq.compose(int8row_ckpt)
    plan = ct.read_plan(NORM, LocalTensorMetadata((0,), (64,), "float32", (64,)))
    view = ct.declaring({NORM: "float32"})
    assert view.composition is ct.composition
    assert view.read_plan_for(NORM) is None
    assert ct.read_plan_for(NORM) is plan
    assert view.logical_metadata()[NORM].dtype == "float32"
    assert ct.logical_metadata()[NORM].dtype == ct.entry(NORM).dtype == "bfloat16"


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint", "native"])
def test_engines_get_the_composition_and_paddle_gets_the_adapter(
    paddle_load: Loader, int8row_ckpt: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    engines: list[Any] = []
    handed: list[Any] = []

    def seen_by_engine(name: str, ct: Any, *args: Any) -> Any:
        engines.append(ct)
        return choose(name, ct, *args)

    def seen_by_paddle(*args: Any, load_transform: Any = None, **kwargs: Any) -> None:
        handed.append(load_transform)
        paddle_load(*args, load_transform=load_transform, **kwargs)

    monkeypatch.setattr(api, "choose", seen_by_engine)
    monkeypatch.setattr(lsd, "load_state_dict", seen_by_paddle)
    target = paddle.zeros([64])
    flexq.load_state_dict({NORM: target}, int8row_ckpt, engine=engine)  # type: ignore[arg-type]
    [composition] = engines
    assert type(composition) is Composition  # not the adapter: no protocol state
    assert set(vars(composition)) == {"checkpoint", "entries", "problems", "formats", "_registry"}
    adapters = [t for t in handed if t is not None]
    if engine == "native":
        assert [type(t) for t in adapters] == [ComposedTransform]
        assert adapters[0].composition is composition
    else:
        assert adapters == []
    np.testing.assert_array_equal(target.numpy(), composition.load(NORM, "float32"))


def test_a_forced_global_plan_is_asked_once_per_key(counted_plans: CountedPlans) -> None:
    """Paddle asks ``read_plan(..., force_global=True)`` when a key's targets disagree,
    then calls apply(): the format plans the whole tensor once, and apply() without a
    read_plan plans it once too, however often it is called."""
    ct = flexq.compose(counted_plans.path, [counted_plans.name])
    part = LocalTensorMetadata((4, 0), (4, 8), "float32", (8, 8))
    plan = ct.read_plan(KEY, part, force_global=True)
    assert ct.read_plan(KEY, part, force_global=True) is plan
    sources = {k: paddle.to_tensor(v) for k, v in ct.read_sources(plan).items()}
    results = [ct.apply(KEY, sources, paddle.float32) for _ in range(2)]
    fresh = flexq.compose(counted_plans.path, [counted_plans.name])
    results += [fresh.apply(KEY, sources, paddle.float32) for _ in range(2)]
    assert counted_plans.asked == [WHOLE, WHOLE]  # one plan per adapter
    for r in results:
        np.testing.assert_array_equal(r.numpy(), ct.load(KEY, "float32"))


@pytest.mark.parametrize("engine", ["direct", "native"])
def test_a_load_plans_each_box_once(
    paddle_load: Loader, counted_plans: CountedPlans, engine: str
) -> None:
    """The native engine validates every piece before Paddle runs, then Paddle's loader
    asks read_plan for the same box: the adapter reuses the validated plan (the format
    was asked twice before)."""
    target = paddle.zeros([8, 8])
    report = flexq.load_state_dict(
        {KEY: target},
        counted_plans.path,
        formats=[counted_plans.name],
        engine=engine,  # type: ignore[arg-type]
    )
    assert report.engine == engine
    assert counted_plans.asked == [WHOLE]
    composition = composition_of(counted_plans.path, [counted_plans.name])
    np.testing.assert_array_equal(target.numpy(), composition.load(KEY, "float32"))
