"""A TCP proxy for fault tests: pass traffic, drop the server's replies, or reset connections.

Dropping replies keeps every connection open while nothing the server sends reaches the
client: what a client sees from a half-open connection (a NAT or firewall that forgot it, a
server frozen mid-failover). Threads and blocking sockets only; it binds 127.0.0.1 on a free
port and stops itself after `lifetime` seconds, so a test that forgets it cannot hang CI.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

CHUNK_BYTES = 65_536
# Sockets wake this often to notice a mode change or shutdown (blocking reads would not).
WAKE_SECONDS = 0.1
DEFAULT_LIFETIME_SECONDS = 300.0


@dataclass
class _Pair:
    client: socket.socket
    server: socket.socket


@dataclass
class FaultProxy:
    """Relays 127.0.0.1:`port` to `target_host`:`target_port` until stop() or `lifetime`."""

    target_port: int
    target_host: str = "127.0.0.1"
    lifetime: float = DEFAULT_LIFETIME_SECONDS
    port: int = 0
    _listener: socket.socket | None = field(default=None, repr=False)
    _pairs: list[_Pair] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stopped: threading.Event = field(default_factory=threading.Event, repr=False)
    _dropping: threading.Event = field(default_factory=threading.Event, repr=False)
    _deadline: float = field(default=0.0, repr=False)
    dropped_bytes: int = 0  # server->client bytes discarded while dropping

    def start(self) -> FaultProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(WAKE_SECONDS)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._deadline = time.monotonic() + self.lifetime
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()
        return self

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def drop_replies(self) -> None:
        """From now on, server->client bytes are read and discarded; connections stay open."""
        self._dropping.set()

    def retarget(self, port: int, host: str = "127.0.0.1") -> None:
        """Move the address to another server, as a failover moves a service address: new
        connections reach `host`:`port`, and every relayed one is reset."""
        self.target_host, self.target_port = host, port
        self.reset_all()

    def pass_traffic(self) -> None:
        """Relay both ways again (bytes dropped meanwhile are gone, as on a real network)."""
        self._dropping.clear()

    def reset_all(self) -> None:
        """Close every relayed connection with a TCP RST (SO_LINGER 0), on both sides."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in (pair.client, pair.server):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                with contextlib.suppress(OSError):
                    sock.close()

    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def stop(self) -> None:
        self._stopped.set()
        self.reset_all()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()

    def _running(self) -> bool:
        if time.monotonic() > self._deadline:
            self._stopped.set()
        return not self._stopped.is_set()

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            while self._running():
                try:
                    client, _ = self._listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return  # the listener was closed by stop()
                try:
                    server = socket.create_connection(
                        (self.target_host, self.target_port), timeout=5
                    )
                except OSError:
                    client.close()
                    continue
                # Before the pair is listed: from then on reset_all() may close its sockets
                # at any moment, and a settimeout() on a closed one would end this thread.
                client.settimeout(WAKE_SECONDS)
                server.settimeout(WAKE_SECONDS)
                pair = _Pair(client, server)
                with self._lock:
                    self._pairs.append(pair)
                for source, sink, replies in ((client, server, False), (server, client, True)):
                    threading.Thread(
                        target=self._relay, args=(pair, source, sink, replies), daemon=True
                    ).start()
        finally:
            self.stop()

    def _relay(
        self, pair: _Pair, source: socket.socket, sink: socket.socket, replies: bool
    ) -> None:
        try:
            while self._running():
                try:
                    data = source.recv(CHUNK_BYTES)
                except TimeoutError:
                    continue
                if not data:
                    return
                if replies and self._dropping.is_set():
                    self.dropped_bytes += len(data)
                    continue
                sink.sendall(data)
        except OSError:
            return  # reset or closed: the other direction's thread ends the same way
        finally:
            self._close(pair)

    def _close(self, pair: _Pair) -> None:
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)
        for sock in (pair.client, pair.server):
            with contextlib.suppress(OSError):
                sock.close()


@contextlib.contextmanager
def fault_proxy(
    target_port: int, *, lifetime: float = DEFAULT_LIFETIME_SECONDS
) -> Iterator[FaultProxy]:
    """A started FaultProxy to 127.0.0.1:`target_port`, stopped on exit."""
    proxy = FaultProxy(target_port, lifetime=lifetime).start()
    try:
        yield proxy
    finally:
        proxy.stop()
