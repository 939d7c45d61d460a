"""A loopback HTTP/1.1 proxy that injects faults between trainvault and the S3 test server.

It forwards bytes unchanged, parses just enough framing (request lines, Content-Length
bodies) to act on the N-th matching response: cut its body after some bytes (FIN or
RST), stall it, drop it entirely (a PUT that landed but whose answer was lost), or
replace it with a 503. Loopback only; every connection ends when the test stops it.
"""

from __future__ import annotations

import contextlib
import queue
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

_REQUEST = re.compile(rb"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/1\.1\r\n(.*?)\r\n\r\n", re.S)


@dataclass
class Rule:
    mode: str  # "fin" | "rst" | "stall" | "drop" | "503"
    method: str = "GET"
    cut_after: int = 0
    times: int = 1
    stall_s: float = 30.0
    path_contains: str = ""
    on_fire: Callable[[], None] | None = None


@dataclass
class FaultProxy:
    upstream_port: int
    log: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._rule: Rule | None = None
        self._conns: list[socket.socket] = []
        self.fired = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self, rule: Rule) -> None:
        with self._lock:
            self._rule = rule

    def disarm(self) -> None:
        with self._lock:
            self._rule = None

    def start(self) -> FaultProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        # shutdown() wakes the blocked accept(); close() alone leaves the port listening until then.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for c in list(self._conns):
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _take(self, method: str, target: str, status: int, body: int | None) -> Rule | None:
        with self._lock:
            r = self._rule
            if (
                r is None
                or r.times <= 0
                or method != r.method
                or r.path_contains not in target
                or status not in (200, 206)
                or body is None
                or (r.mode in ("fin", "rst", "stall") and body <= r.cut_after)
            ):
                return None
            r.times -= 1
            self.fired += 1
            return r

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._conns += [client, upstream]
            requests: queue.Queue = queue.Queue()
            reader = threading.Thread(target=self._client_to_upstream, args=(client, upstream, requests), daemon=True)
            reader.start()
            threading.Thread(
                target=self._upstream_to_client, args=(client, upstream, requests, reader), daemon=True
            ).start()

    def _client_to_upstream(self, client: socket.socket, upstream: socket.socket, requests: queue.Queue) -> None:
        pending = b""
        try:
            while data := client.recv(1 << 16):
                pending += data
                end = 0
                # Match before trimming: a PUT's head arrives together with body bytes.
                for m in _REQUEST.finditer(pending):
                    requests.put((m.group(1).decode(), m.group(2).decode()))
                    end = m.end()
                pending = pending[end:][-8192:]
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_WR)

    @staticmethod
    def _abort(client: socket.socket, upstream: socket.socket, mode: str, reader: threading.Thread) -> None:
        # close() from another thread would not wake a blocked recv(): shut down first.
        if mode == "rst":
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RD if mode == "rst" else socket.SHUT_RDWR)
        reader.join(5)
        client.close()
        upstream.close()

    def _upstream_to_client(
        self, client: socket.socket, upstream: socket.socket, requests: queue.Queue, reader: threading.Thread
    ) -> None:
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = upstream.recv(1 << 16)
                    if not data:
                        client.close()
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                head += b"\r\n\r\n"
                status = int(head.split(b" ", 2)[1])
                method, target = requests.get(timeout=10)
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                body = 0 if method == "HEAD" or status in (204, 304) else int(length.group(1)) if length else None
                rule = self._take(method, target, status, body)
                self.log.append({"method": method, "target": target, "status": status, "fault": rule and rule.mode})
                if rule and rule.on_fire:
                    rule.on_fire()
                if rule and rule.mode == "drop":
                    return self._abort(client, upstream, "rst", reader)
                if body is None:  # chunked: pass through untouched
                    client.sendall(head + buf)
                    while data := upstream.recv(1 << 16):
                        client.sendall(data)
                    client.close()
                    return
                if rule and rule.mode == "503":
                    client.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
                    client_out = None
                else:
                    client.sendall(head)
                    client_out = client
                sent = 0
                while sent < body:
                    if not buf:
                        buf = upstream.recv(1 << 16)
                        if not buf:
                            client.close()
                            return
                    take, buf = buf[: body - sent], buf[body - sent :]
                    if (
                        client_out is not None
                        and rule
                        and rule.mode in ("fin", "rst", "stall")
                        and sent + len(take) >= rule.cut_after
                    ):
                        client.sendall(take[: rule.cut_after - sent])
                        if rule.mode == "stall":
                            time.sleep(rule.stall_s)
                        return self._abort(client, upstream, rule.mode, reader)
                    if client_out is not None:
                        client_out.sendall(take)
                    sent += len(take)
        except (OSError, queue.Empty):
            client.close()
            upstream.close()
