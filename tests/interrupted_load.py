"""An atomic ``flexq.load_state_dict`` in a process of its own, for tests/test_interrupts.py
to interrupt at any moment (its imports included).

Run as ``python interrupted_load.py CHECKPOINT MAX_INFLIGHT_BYTES``: bfloat16 targets,
every element 0.5, get the checkpoint's logical tensors. Prints two lines on stdout:
``loaded DIGEST`` or ``interrupted DIGEST`` (a KeyboardInterrupt ended it; DIGEST is the
sha256 of every target's bytes in key order, ``-`` when the targets did not exist yet),
then ``threads N``: the threads other than the main one and daemon ones still alive,
which would hold up the end of the process. (Before them, a line for each interrupt
Python lost: one that landed in a weakref callback, where it cannot be raised.)
"""

from __future__ import annotations

try:
    import hashlib
    import logging
    import signal
    import sys
    import threading
    from typing import Any
except KeyboardInterrupt:  # before any line of flexq or Paddle ran: nothing to check
    print("interrupted -\nthreads 0")
    raise SystemExit(0) from None

#: The value every target starts with (exact in bfloat16).
START = 0.5


def digest(targets: dict[str, Any]) -> str:
    """sha256 of the targets' bytes, in key order."""
    h = hashlib.sha256()
    for key in sorted(targets):
        h.update(targets[key].numpy().tobytes())
    return h.hexdigest()


def _unraisable(info: Any) -> None:
    # A KeyboardInterrupt that lands in a weakref callback or __del__ (importlib's
    # module locks have one) cannot be raised: Python prints "Exception ignored" and
    # goes on, so the interrupt is lost. Say so on stdout instead of in a traceback.
    if isinstance(info.exc_value, KeyboardInterrupt):
        print("lost an interrupt Python could not raise")
    else:
        sys.__unraisablehook__(info)


def main(path: str, max_inflight_bytes: int) -> None:
    logging.getLogger("flexq").setLevel(logging.WARNING)  # no engine choice on stderr
    sys.unraisablehook = _unraisable
    targets: dict[str, Any] | None = None
    outcome = "interrupted"
    try:
        import paddle

        import flexq

        ct = flexq.compose(path)
        targets = {
            key: paddle.full(list(entry.shape), START, dtype="bfloat16")
            for key, entry in ct.entries.items()
        }
        flexq.load_state_dict(targets, path, atomic=True, max_inflight_bytes=max_inflight_bytes)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the outcome is decided
        outcome = "loaded"
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ImportError as exc:
        # Paddle (pybind11) reports a Ctrl-C during its own import as this, with the
        # KeyboardInterrupt as its cause: the caller's import, before flexq runs.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if not isinstance(exc.__cause__, KeyboardInterrupt):
            raise
    main_thread = threading.main_thread()
    blocking = [t for t in threading.enumerate() if t is not main_thread and not t.daemon]
    print(outcome, "-" if targets is None else digest(targets))
    print("threads", len(blocking))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
