"""The conformance suite every format's tests run: the behaviour the core promises of
any format, checked over a tiny checkpoint the format writes.

For format authors. A format package's tests run it with a few lines::

    from flexq.testing import FormatConformance
    import flexq_myformat.plugin

    class TestConformance(FormatConformance):
        format_name = "myformat"
        methods = ("myformat",)
        plugin = flexq_myformat.plugin.plugin

pytest collects the ``test_*`` methods below as the package's own tests: the entry
point resolves to the plugin, it claims exactly ``methods``, ``flexq list-formats``
shows its row, a local box equals the slice of the whole tensor, an empty box decodes
to an empty array, numpy and Paddle inputs give the same bits, a local read is bounded
by its box, an orphaned component and a missing companion are errors
naming the module, and every plan declares its scales. The checkpoint is the format's
own encoder over :attr:`FormatConformance.weights` (override
:meth:`FormatConformance.write_checkpoint` for a format without one).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points, version
from pathlib import Path
from typing import ClassVar

import numpy as np

import flexq
from flexq.errors import FlexqError
from flexq.io.checkpoint import Checkpoint
from flexq.io.writer import RawTensor, save_checkpoint
from flexq.plan import TargetSlice
from flexq.plugin.manager import registry
from flexq.testing.boxes import decode_box
from flexq.testing.oracles import same_bits
from flexq.testing.plans import check_conformance

#: The hooks every format answers (``flexq_encode`` only a format that writes).
HOOKS = (
    "flexq_quant_methods",
    "flexq_logical_metadata",
    "flexq_recognized_keys",
    "flexq_source_keys",
    "flexq_read_plan",
    "flexq_apply",
)


class FormatConformance:
    """Subclass it as ``Test...`` in a format's tests and set the names below
    (``distribution`` only when it is not ``flexq-format-<format_name>``)."""

    #: the format's name (its entry point's name).
    format_name: ClassVar[str]
    #: the distribution that installs it; None: ``flexq-format-<format_name>``.
    distribution: ClassVar[str | None] = None
    #: the config methods it claims (``flexq_quant_methods``), in its order.
    methods: ClassVar[tuple[str, ...]]
    #: the plugin object its entry point names.
    plugin: ClassVar[object]
    #: float32 weights (key -> [out, in] shape) the encoder writes as the checkpoint.
    weights: ClassVar[Mapping[str, tuple[int, ...]]] = {
        "model.layers.0.mlp.up_proj.weight": (128, 64),
        "model.layers.0.mlp.down_proj.weight": (64, 128),
    }
    #: at most this fraction of a tensor's stored bytes is read for half of its rows.
    read_fraction: ClassVar[float] = 0.75

    # -- the checkpoint -----------------------------------------------------------
    def write_checkpoint(self, directory: Path) -> Path:
        """A tiny checkpoint of the format in the empty ``directory``: by default its
        encoder over :attr:`weights` (seeded normal values)."""
        rng = np.random.default_rng(0)
        tensors = {
            k: (rng.standard_normal(s) * 0.05).astype(np.float32) for k, s in self.weights.items()
        }
        registry.encode(self.format_name, directory, tensors, {})
        return directory

    def _checkpoint(self, tmp_path: Path) -> tuple[Path, flexq.ComposedTransform]:
        path = self.write_checkpoint(tmp_path / "ckpt")
        ct = flexq.compose(path, [self.format_name])
        owned = [k for k, e in ct.entries.items() if e.owner == self.format_name]
        assert owned, f"the checkpoint holds no tensor of format {self.format_name!r}"
        return path, ct

    def _distribution(self) -> str:
        return self.distribution or f"flexq-format-{self.format_name}"

    def _owned(self, ct: flexq.ComposedTransform) -> list[str]:
        return sorted(k for k, e in ct.entries.items() if e.owner == self.format_name)

    # -- the installed plugin -----------------------------------------------------
    def test_entry_point_resolves_to_the_plugin_object(self) -> None:
        (ep,) = [e for e in entry_points(group="flexq") if e.name == self.format_name]
        assert ep.load() is self.plugin
        assert ep.dist is not None
        assert ep.dist.name == self._distribution()

    def test_list_formats_row_names_distribution_version_methods_and_description(
        self,
    ) -> None:
        (row,) = [r for r in flexq.list_formats() if r.name == self.format_name]
        assert row.error is None
        assert row.distribution == self._distribution()
        assert row.version == version(self._distribution())
        assert row.description == (self.plugin.__doc__ or "").strip().splitlines()[0]
        assert row.description
        assert row.methods == tuple(sorted(registry.quant_methods(self.format_name)))
        assert row.methods

    def test_every_hook_reaches_the_format(self) -> None:
        for hook in HOOKS:
            assert registry.implements(self.format_name, hook), hook

    def test_the_format_claims_exactly_its_config_methods(self) -> None:
        assert tuple(self.plugin.flexq_quant_methods()) == self.methods  # type: ignore[attr-defined]

    # -- what it decodes ------------------------------------------------------------
    def test_a_local_box_equals_the_slice_of_the_whole(self, tmp_path: Path) -> None:
        _, ct = self._checkpoint(tmp_path)
        for key in self._owned(ct):
            whole = ct.load(key, "float32")
            offset, shape = middle_box(whole.shape)
            box = decode_box(ct, key, offset, shape)
            index = tuple(slice(o, o + s) for o, s in zip(offset, shape, strict=True))
            same_bits(np.asarray(box), np.ascontiguousarray(whole[index]))

    def test_an_empty_box_decodes_to_an_empty_result(self, tmp_path: Path) -> None:
        """A rank whose shard of a tensor is empty (more ranks than rows) gets an empty
        array of the box's shape, whatever the box's offset."""
        _, ct = self._checkpoint(tmp_path)
        for key in self._owned(ct):
            shape = ct.entry(key).shape
            offset, local = middle_box(shape)
            empty = (0, *local[1:])
            box = decode_box(ct, key, offset, empty)
            assert np.asarray(box).shape == empty, key

    def test_numpy_and_paddle_sources_give_the_same_bits(self, tmp_path: Path) -> None:
        _, ct = self._checkpoint(tmp_path)
        for key in self._owned(ct):
            offset, shape = middle_box(ct.entry(key).shape)
            on_host = decode_box(ct, key, offset, shape)
            on_device = decode_box(ct, key, offset, shape, paddle=True)
            same_bits(np.asarray(on_device.numpy()), np.asarray(on_host))

    def test_a_local_read_is_bounded_by_its_box(self, tmp_path: Path) -> None:
        _, ct = self._checkpoint(tmp_path)
        for key in self._owned(ct):
            shape = ct.entry(key).shape
            half = TargetSlice(shape, (shape[0] // 2, *shape[1:]), (0,) * len(shape), "float32")
            plan = ct.plan(key, half)
            read = sum(ct.checkpoint.box_bytes(k, box[1]) for k, box in plan.source_slices.items())
            whole = sum(ct.checkpoint.info(k).nbytes for k in plan.source_slices)
            assert plan.mode == "local", key
            assert read <= self.read_fraction * whole, (key, read, whole)

    def test_plans_declare_every_scale_they_read(self, tmp_path: Path) -> None:
        _, ct = self._checkpoint(tmp_path)
        check_conformance(ct, [self.format_name])

    # -- what it refuses -----------------------------------------------------------
    def test_an_orphaned_component_is_an_error_naming_its_module(self, tmp_path: Path) -> None:
        """Without a tensor's largest source (its codes), the rest are orphans."""
        path, ct = self._checkpoint(tmp_path)
        key = self._owned(ct)[0]
        sources = ct.entry(key).sources
        codes = max(sources, key=lambda k: ct.checkpoint.info(k).nbytes)
        assert_refused(without(path, tmp_path / "orphan", codes), self.format_name, key)

    def test_a_missing_companion_is_an_error_naming_its_module(self, tmp_path: Path) -> None:
        """Without a tensor's smallest source (a scale), its codes are not loadable."""
        path, ct = self._checkpoint(tmp_path)
        key = self._owned(ct)[0]
        sources = ct.entry(key).sources
        assert len(sources) > 1, f"{key!r} has one source: nothing can be missing"
        companion = min(sources, key=lambda k: ct.checkpoint.info(k).nbytes)
        assert_refused(without(path, tmp_path / "missing", companion), self.format_name, key)


def middle_box(shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A box of half of every axis, starting a quarter in (cuts blocks and words)."""
    return tuple(d // 4 for d in shape), tuple(max(1, d // 2) for d in shape)


def without(src: Path, dst: Path, drop: str) -> Path:
    """A copy of checkpoint ``src`` in ``dst`` with tensor ``drop`` left out."""
    with Checkpoint(src) as ckpt:
        tensors = {k: RawTensor(ckpt.info(k).dtype, ckpt.read(k)) for k in ckpt if k != drop}
        config = dict(ckpt.config)
    return save_checkpoint(dst, tensors, config=config or None)


def assert_refused(path: Path, format_name: str, logical_key: str) -> None:
    """Composing ``path`` and loading every tensor raises a FlexqError naming the module."""
    module = logical_key.rsplit(".", 1)[0]
    error: FlexqError | None = None
    try:
        ct = flexq.compose(path, [format_name])
        for key in ct.entries:
            ct.load(key, "float32")
    except FlexqError as exc:
        error = exc
    if error is None:
        raise AssertionError(f"{path}: loaded without error, expected one naming {module!r}")
    assert module in str(error), (module, str(error))
