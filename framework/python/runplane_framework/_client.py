"""A small client for tests and tools: http.client over a unix socket."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any, Dict, Optional, Tuple, Union


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("framework", timeout=timeout)
        self._socket_path = socket_path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._socket_path)
        self.sock = s


class UnixHTTPConnection:
    """One keep-alive HTTP connection to a framework's socket."""

    def __init__(self, socket_path: str, timeout: float = 10.0) -> None:
        self._conn = _UnixConnection(socket_path, timeout)

    def request(self, method: str, path: str, body: Any = None,
                headers: Optional[Dict[str, str]] = None,
                encode_chunked: bool = False) -> Tuple[int, Any]:
        """Send one request; body: bytes/str as is, anything else as JSON (or an
        iterable of bytes with encode_chunked). Returns the status and the decoded
        JSON answer (None when empty)."""
        data: Union[bytes, str, Any, None]
        if body is None or isinstance(body, (bytes, str)) or encode_chunked:
            data = body
        else:
            data = json.dumps(body)
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        if encode_chunked:
            hdrs["Transfer-Encoding"] = "chunked"
        hdrs.update(headers or {})
        self._conn.request(method, path, body=data, headers=hdrs, encode_chunked=encode_chunked)
        r = self._conn.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None)

    def close(self) -> None:
        self._conn.close()
