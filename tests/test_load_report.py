"""What a load reports, under each engine that runs in one process, and what Paddle logs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import numpy as np
import paddle
import pytest

import flexq
from flexq.load.quiet import PADDLE_LOGGERS


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint"])
def test_bytes_read_counts_the_planned_source_boxes_and_paddle_stays_quiet(
    tmp_path: Path, engine: Literal["direct", "flexcheckpoint"]
) -> None:
    values = np.arange(24, dtype=np.float32).reshape(4, 6)
    path = flexq.save_checkpoint(tmp_path / "c", {"w": flexq.RawTensor.of(values)})
    target = paddle.zeros([4, 6], "float32")
    paddle_log = logging.getLogger(PADDLE_LOGGERS[0])
    records = Records()
    paddle_log.addHandler(records)
    try:
        report = flexq.load_state_dict({"w": target}, path, engine=engine)
        quiet = list(records.messages)
        flexq_log = logging.getLogger("flexq")
        old = flexq_log.level
        flexq_log.setLevel(logging.DEBUG)  # what `flexq --debug` sets: Paddle's logs show
        try:
            flexq.load_state_dict({"w": target}, path, engine=engine)
        finally:
            flexq_log.setLevel(old)
    finally:
        paddle_log.removeHandler(records)
    assert report.engine == engine
    assert report.bytes_read == report.planned_bytes == values.nbytes
    np.testing.assert_array_equal(target.numpy(), values)
    assert quiet == []
    if engine == "flexcheckpoint":
        assert any("loading files" in m for m in records.messages), records.messages
