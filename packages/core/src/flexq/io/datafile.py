"""One safetensors data file, opened once: its header and its bytes from the same descriptor.

For :class:`flexq.io.checkpoint.Checkpoint`. The file is opened when its header is
read and stays open; its identity (device, inode, size, modification time) is
taken then, and checked again before data is read, so a file replaced, rewritten
or truncated since is a :class:`~flexq.errors.CheckpointError` naming it, never
the old header's offsets over new bytes. Data is read with ``preadv`` straight
into the caller's buffers (no memory map: a file truncated during a read is a
short read and an error, never SIGBUS), and the kernel is told the access is
random, so it reads the pages asked for and nothing around them; the load's
read-ahead (:mod:`flexq.load.readahead`) asks for the next pieces' spans early
(:meth:`DataFile.prefetch`).
"""

from __future__ import annotations

import io
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flexq.errors import CheckpointError
from flexq.io.header import Header, read_header

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

#: Largest byte count one ``preadv`` call is asked for (Linux caps a read at 2 GiB - 4 KiB).
MAX_CALL_BYTES = 1 << 30
_PROC_FD = Path("/proc/self/fd")
_PREADV = hasattr(os, "preadv")
#: preadv2's flag for "only what the page cache holds, never wait for the disk" (Linux).
_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None) if _PREADV else None
#: Bytes one prefetch request asks for (below any read-ahead window the kernel uses).
PREFETCH_CHUNK = 2 << 20
#: Most buffers one ``preadv`` call takes (POSIX guarantees at least 16; Linux takes 1024).
MAX_BUFFERS = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


@dataclass(frozen=True)
class Identity:
    """What names one version of one file: it changes when the file is replaced or rewritten."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class DataFile:
    """A data file of a checkpoint, open from its header read to :meth:`close`.

    :param name: the file's name inside the checkpoint (used in messages).
    :param path: the checked path to open (in a cache snapshot, the link to its blob).
    :raises CheckpointError: when the file cannot be opened or its header is malformed.
    """

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self._lock = threading.Lock()
        self._fh = self._open()
        try:
            self.identity = Identity.of(os.fstat(self._fh.fileno()))
            self.header: Header = read_header(self._fh, self.identity.size, name)
        except CheckpointError as exc:
            self._fh.close()
            # The header's messages start with the file's name; the user needs its full path.
            text = str(exc)
            if text.startswith(f"{name}:"):
                text = f"{self.path}{text[len(name) :]}"
            raise type(exc)(text) from None
        except BaseException:
            self._fh.close()
            raise

    def _open(self) -> io.FileIO:
        try:
            # Unbuffered: the header is read once, data goes through preadv.
            fh = open(self.path, "rb", buffering=0)  # noqa: SIM115 (kept open: the point)
        except OSError as exc:
            raise CheckpointError(f"{self.name}: cannot open {self.path} ({exc})") from None
        if hasattr(os, "posix_fadvise"):
            # Reads are sized to the runs a plan needs: read-around would pull in
            # pages of other ranks' slices (a whole file per node for row slices).
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
        # A checkpoint nobody closes closes its files when it goes (no ResourceWarning).
        weakref.finalize(self, fh.close)
        return fh

    def check(self) -> None:
        """Refuse to read when the file is not the one whose header was read.

        Both the open descriptor (rewritten or truncated in place) and the path
        (replaced by another file) are compared with the identity taken at open.
        A file closed by :meth:`close` is opened again first (and must be the same).
        """
        if self._fh.closed:
            self._fh = self._open()
        try:
            now_fd = Identity.of(os.fstat(self._fh.fileno()))
            now_path = Identity.of(os.stat(self.path))
        except (OSError, ValueError) as exc:
            raise self.changed(f"it can no longer be read ({exc})") from None
        if now_fd != self.identity:
            raise self.changed(f"it was rewritten or truncated ({_diff(self.identity, now_fd)})")
        if now_path != self.identity:
            raise self.changed(f"it was replaced ({_diff(self.identity, now_path)})")

    def reopen_path(self) -> Path:
        """A path that opens this very file, for a reader that opens files by name
        (Paddle's loader): on Linux ``/proc/self/fd/N`` of the open descriptor, so a
        file renamed over this one's name is not what that reader gets; elsewhere the
        checked path (then :meth:`check` before and after its reads is all there is)."""
        proc = _PROC_FD / str(self._fh.fileno())
        return proc if not self._fh.closed and proc.exists() else self.path

    def changed(self, how: str) -> CheckpointError:
        """The error for a file that is no longer the one opened."""
        return CheckpointError(
            f"{self.name}: the file changed since it was opened: {how} ({self.path}); "
            "reload the checkpoint (compose again) once it is complete"
        )

    def prefetch(self, ranges: Iterable[tuple[int, int]]) -> None:
        """Ask the kernel to start reading the byte ranges [start, stop) now, all of them.

        With random access advised, a read fetches at most one read-ahead window at a
        time and waits for it; queued first, a cold read's requests overlap each other
        (and the copies) instead. Exactly these ranges are fetched, nothing around them.
        """
        if not hasattr(os, "posix_fadvise"):
            return
        fd = self._fh.fileno()
        for start, stop in ranges:
            # The kernel queues at most one read-ahead window per call: ask in chunks.
            for at in range(start, stop, PREFETCH_CHUNK):
                os.posix_fadvise(fd, at, min(PREFETCH_CHUNK, stop - at), os.POSIX_FADV_WILLNEED)

    def read_cached(self, offset: int, buffer: memoryview) -> int:
        """Fill ``buffer`` from ``offset`` with what the page cache already holds, never
        waiting for the disk; the bytes filled (0 where the platform cannot tell). A warm
        read then needs no prefetch, whose walk over cached pages costs as much as a
        fifth of the copy."""
        if _NOWAIT is None or not buffer.nbytes:
            return 0
        try:
            return os.preadv(self._fh.fileno(), [buffer], offset, _NOWAIT)
        except OSError:
            return 0  # EAGAIN (nothing cached), or a file system without the flag

    def read_spans(self, spans: Sequence[tuple[int, Sequence[memoryview]]]) -> None:
        """Fill buffers from the file: each span is (file offset, buffers filled in order
        from that offset). A short read (the file truncated meanwhile) is an error."""
        fd = self._fh.fileno()
        for offset, buffers in spans:
            for start in range(0, len(buffers), MAX_BUFFERS):
                offset = self._preadv_all(fd, list(buffers[start : start + MAX_BUFFERS]), offset)

    def _preadv_all(self, fd: int, buffers: list[memoryview], offset: int) -> int:
        """Fill every buffer from ``offset`` on, retrying partial reads; the offset after."""
        while buffers:
            # One call is kept under the kernel's per-call cap by the buffers it is given.
            call: list[memoryview] = []
            total = 0
            for b in buffers:
                if call and total + b.nbytes > MAX_CALL_BYTES:
                    break
                call.append(b)
                total += b.nbytes
            try:
                got = os.preadv(fd, call, offset) if _PREADV else self._readinto(call, offset)
            except OSError as exc:
                raise CheckpointError(
                    f"{self.name}: read at byte {offset} failed ({exc}); "
                    "check the disk and reload the checkpoint"
                ) from None
            if got == 0:
                raise self.changed(f"it ends before byte {offset + total}")
            offset += got
            while buffers and got >= buffers[0].nbytes:
                got -= buffers[0].nbytes
                buffers.pop(0)
            if got:
                buffers[0] = buffers[0][got:]
        return offset

    def _readinto(self, buffers: list[memoryview], offset: int) -> int:
        """``preadv`` where the platform has none (Windows): seek and read under a lock."""
        with self._lock:
            self._fh.seek(offset)
            got = 0
            for b in buffers:
                n = self._fh.readinto(b) or 0
                got += n
                if n < b.nbytes:
                    break
            return got

    def close(self) -> None:
        """Close the descriptor (a later :meth:`check` opens the file again)."""
        self._fh.close()


def _diff(was: Identity, now: Identity) -> str:
    if (was.device, was.inode) != (now.device, now.inode):
        return "another file now has its name"
    if was.size != now.size:
        return f"{was.size} bytes when opened, {now.size} now"
    return "modified since it was opened"
