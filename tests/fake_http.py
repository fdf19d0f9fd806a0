"""In-process HTTP servers for unit tests that play a registry (a plain module, importable by any tier)."""

from __future__ import annotations

import http.server
from typing import Any


class FakeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class FakeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def reply(self, code: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
