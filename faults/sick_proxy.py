"""A sick server for fault injection: an HTTP proxy on 127.0.0.1 that fails or delays a share
of the requests to the server behind it (MLflow answering 503, S3 answering SlowDown)."""

from __future__ import annotations

import time

from faults.servers import LOOPBACK


class SickProxy:
    """An HTTP proxy on 127.0.0.1 in front of a loopback server that, while ``sick``, answers a
    share of requests with an error or delays them: a server that is up but unwell.

    Each request, by a seeded draw: with ``fail_share`` it gets ``status`` with ``body`` (some
    before reaching the server, some after the server did the work, as when a load balancer
    times out on a slow backend: a client's retry then repeats a done request); with
    ``delay_share`` it waits ``delay_s`` before it is forwarded; otherwise it passes. The counts
    are in ``counts``. ``share_after``: the share of failures answered after the server did the
    work (0 for S3's SlowDown, which refuses before doing anything).
    """

    HOP_BY_HOP = {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "proxy-connection",
        "te",
        "expect",
    }

    def __init__(
        self,
        upstream_port: int,
        *,
        fail_share: float,
        status: int = 503,
        body: bytes = b"",
        content_type: str = "text/plain",
        delay_share: float = 0.0,
        delay_s: float = 0.0,
        share_after: float = 0.5,
        seed: int = 0,
    ):
        import random
        import threading

        self.upstream_port = upstream_port
        self.fail_share, self.status, self.body = fail_share, status, body
        self.content_type = content_type
        self.delay_share, self.delay_s = delay_share, delay_s
        self.share_after = share_after
        self.sick = False
        self.counts = {"passed": 0, "failed_before": 0, "failed_after": 0, "delayed": 0}
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._server = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> SickProxy:
        import http.server
        import threading

        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _any

        self._server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _draw(self) -> str:
        with self._lock:
            if not self.sick:
                outcome = "passed"
            else:
                value = self._random.random()
                if value < self.fail_share * (1 - self.share_after):
                    outcome = "failed_before"
                elif value < self.fail_share:
                    outcome = "failed_after"
                elif value < self.fail_share + self.delay_share:
                    outcome = "delayed"
                else:
                    outcome = "passed"
            self.counts[outcome] += 1
            return outcome

    def _handle(self, handler) -> None:  # noqa: ANN001 - http.server's handler
        import http.client

        body = _request_body(handler)
        outcome = self._draw()
        error = [("Content-Type", self.content_type)]
        if outcome == "failed_before":
            self._answer(handler, self.status, error, self.body, head=handler.command == "HEAD")
            return
        if outcome == "delayed":
            time.sleep(self.delay_s)
        upstream = http.client.HTTPConnection(LOOPBACK, self.upstream_port, timeout=120)
        try:
            upstream.putrequest(
                handler.command, handler.path, skip_host=True, skip_accept_encoding=True
            )
            for name, value in handler.headers.items():
                if name.lower() not in self.HOP_BY_HOP and name.lower() != "content-length":
                    upstream.putheader(name, value)
            # the same framing as the client's (S3's aws-chunked uploads come chunked)
            chunked = "chunked" in handler.headers.get("Transfer-Encoding", "").lower()
            if chunked:  # forwarded as it came, chunk framing included
                upstream.putheader("Transfer-Encoding", "chunked")
                upstream.endheaders()
                upstream.send(body)
            else:
                upstream.putheader("Content-Length", str(len(body)))
                upstream.endheaders(body)
            answer = upstream.getresponse()
            content = answer.read()
            headers = [(k, v) for k, v in answer.getheaders() if k.lower() not in self.HOP_BY_HOP]
            status = answer.status
        finally:
            upstream.close()
        if outcome == "failed_after":
            self._answer(handler, self.status, error, self.body, head=handler.command == "HEAD")
            return
        self._answer(handler, status, headers, content, head=handler.command == "HEAD")

    @staticmethod
    def _answer(handler, status: int, headers: list, content: bytes, head: bool = False) -> None:  # noqa: ANN001
        handler.send_response(status)
        for name, value in headers:
            if head or name.lower() != "content-length":  # HEAD: the object's length
                handler.send_header(name, value)
        if not head:
            handler.send_header("Content-Length", str(len(content)))
        handler.end_headers()
        if not head:
            handler.wfile.write(content)


def _request_body(handler) -> bytes:  # noqa: ANN001
    """The request's body as it came: ``Content-Length`` bytes, or the whole chunked stream
    (framing and trailers included)."""
    if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
        raw = []
        while True:
            line = handler.rfile.readline()
            raw.append(line)
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    trailer = handler.rfile.readline()
                    raw.append(trailer)
                    if trailer in (b"\r\n", b"\n", b""):
                        return b"".join(raw)
            raw.append(handler.rfile.read(size + 2))  # the chunk and its CRLF
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


__all__ = ["SickProxy"]
