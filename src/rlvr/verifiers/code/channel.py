"""The checker's end of the pipe pair to a sandboxed process: framed messages with a deadline and a size cap
on every read and every write.

A frame is a 4-byte big-endian length and that many bytes. All fds are non-blocking and every wait is a
``select`` bounded by the caller's deadline, so a peer that sends half a frame and falls silent, never reads
while the checker writes, or announces a frame larger than ``max_frame`` cannot hold the checker past its
deadline or make it allocate more than the cap. While it waits, the channel also drains the program's
stdout and stderr (keeping ``output_cap`` bytes of each), so a chatty program never blocks on a full pipe.
"""

from __future__ import annotations

import os
import select
import struct
import time

MAX_FRAME = 64 << 20  # codec.MAX_FRAME: this module imports nothing of the package (the judge loads it by path)

_HEADER = struct.Struct(">I")


class ChannelTimeout(Exception):
    """The deadline passed before the frame was sent or received."""


class ChannelClosed(Exception):
    """The peer closed its end (it exited or was killed)."""


class ChannelViolation(Exception):
    """The peer announced a frame larger than the cap: it is not speaking the protocol."""


class Channel:
    """Framed messages over ``(read_fd, write_fd)``; ``outputs`` are the peer's stdout/stderr fds."""

    def __init__(self, read_fd: int, write_fd: int, outputs: list[int], output_cap: int,
                 max_frame: int = MAX_FRAME):
        self.read_fd, self.write_fd = read_fd, write_fd
        self.max_frame = max_frame
        self.output_cap = output_cap
        self.output: dict[int, bytearray] = {fd: bytearray() for fd in outputs}
        self.finished: dict[int, bytearray] = {}  # output streams that reached EOF
        for fd in (read_fd, write_fd, *outputs):
            os.set_blocking(fd, False)

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def captured(self, fd: int) -> bytes:
        return bytes(self.output.get(fd) or self.finished.get(fd) or b"")

    def send(self, body: bytes, deadline: float) -> None:
        if len(body) > self.max_frame:
            raise ChannelViolation(f"a frame of {len(body)} bytes is over the cap of {self.max_frame}")
        pending = memoryview(_HEADER.pack(len(body)) + body)
        while pending:
            self._wait(deadline, write=True)
            try:
                n = os.write(self.write_fd, pending[: 1 << 20])
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise ChannelClosed from exc
            pending = pending[n:]

    def receive(self, deadline: float) -> bytearray:
        header = self._read(_HEADER.size, deadline)
        (n,) = _HEADER.unpack(header)
        if n > self.max_frame:
            raise ChannelViolation(f"the peer announced {n} bytes, over the cap of {self.max_frame}")
        return self._read(n, deadline)

    def _read(self, n: int, deadline: float) -> bytearray:
        buf = bytearray()
        while len(buf) < n:
            self._wait(deadline, write=False)
            try:
                chunk = os.read(self.read_fd, min(n - len(buf), 1 << 20))
            except BlockingIOError:
                continue
            if not chunk:
                raise ChannelClosed
            buf += chunk
        return buf

    def _wait(self, deadline: float, *, write: bool) -> None:
        """Until the channel is ready to read (or write), draining program output meanwhile."""
        fd = self.write_fd if write else self.read_fd
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout
            poller = select.poll()  # not select(): a busy checker may hold fds numbered past 1024
            for out in self.output:
                poller.register(out, select.POLLIN)
            poller.register(fd, select.POLLOUT if write else select.POLLIN)
            ready = dict(poller.poll(min(remaining, 0.5) * 1000))
            for out in list(self.output):
                if ready.get(out):
                    self._drain(out)
            if ready.get(fd):  # ready, or an error or hang-up the next read or write reports
                return

    def _drain(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.finished[fd] = self.output.pop(fd)
            return
        buf = self.output[fd]
        if len(buf) < self.output_cap:
            buf += chunk[: self.output_cap - len(buf)]
