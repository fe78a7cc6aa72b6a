"""runplane framework contract, reference implementation (standard library only).

The worker sidecar talks to the user's framework over HTTP on a unix socket:

* ``GET  <health path>`` (default ``/healthz``) answers 200 while the framework can serve;
* ``POST <invoke path>`` (default ``/invoke``) takes the invocation envelope
  (``version``, ``invocationID``, ``serverlessRequestID``, ``workerName``,
  ``workerNamespace``, ``mode``, ``contentType``, ``headers``, ``attributes``,
  ``payload``, ``timeoutSeconds``, ``dispatchedAt``) and answers
  ``{statusCode, contentType, headers, body, error}``.

Usage::

    import runplane_framework as rf

    @rf.handler
    def generate(req: rf.Request) -> rf.Response:
        return rf.Response(body={"echo": req.payload})

    if __name__ == "__main__":
        rf.serve(generate)

The socket and paths come from the env the webhook injects
(``RUNPLANE_FRAMEWORK_SOCKET`` / ``SERVERLESS_FRAMEWORK_SOCKET_PATH`` and the
``*_INVOKE_PATH`` / ``*_HEALTH_PATH`` names), defaulting to the contract's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import socketserver
import stat
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Dict, Optional, Union

__all__ = [
    "Request",
    "Response",
    "Framework",
    "handler",
    "serve",
    "config_from_env",
    "DEFAULT_SOCKET",
    "DEFAULT_INVOKE_PATH",
    "DEFAULT_HEALTH_PATH",
]

VERSION = "v1"
DEFAULT_SOCKET = "/tmp/serverless-framework/framework.sock"
DEFAULT_INVOKE_PATH = "/invoke"
DEFAULT_HEALTH_PATH = "/healthz"


@dataclasses.dataclass
class Request:
    """The invocation envelope the sidecar posts."""

    invocationID: str
    version: str = VERSION
    serverlessRequestID: str = ""
    workerName: str = ""
    workerNamespace: str = ""
    mode: str = ""
    contentType: str = ""
    headers: Dict[str, str] = dataclasses.field(default_factory=dict)
    attributes: Dict[str, str] = dataclasses.field(default_factory=dict)
    payload: Any = None
    timeoutSeconds: int = 0
    dispatchedAt: str = ""

    @classmethod
    def from_dict(cls, d: Any) -> "Request":
        if not isinstance(d, dict):
            raise ValueError("invocation envelope must be a JSON object")
        if not d.get("invocationID"):
            raise ValueError("invocation envelope: field invocationID must not be empty")
        known = {f.name for f in dataclasses.fields(cls)}
        # Unknown fields are ignored so the sidecar may add fields additively.
        return cls(**{k: v for k, v in d.items() if k in known and v is not None})

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Response:
    """What the framework answers; a non-empty error makes the invocation failed."""

    statusCode: int = 200
    contentType: str = ""
    headers: Dict[str, str] = dataclasses.field(default_factory=dict)
    body: Any = None
    error: str = ""

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"statusCode": self.statusCode or 200}
        if self.contentType:
            d["contentType"] = self.contentType
        if self.headers:
            d["headers"] = self.headers
        if self.body is not None:
            d["body"] = self.body
        if self.error:
            d["error"] = self.error
        return d


HandlerFunc = Callable[[Request], Union[Response, Dict[str, Any], None]]


def handler(fn: HandlerFunc) -> HandlerFunc:
    """Mark fn as an invocation handler (documentation only; any callable works)."""
    fn.__runplane_handler__ = True  # type: ignore[attr-defined]
    return fn


def config_from_env(env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Socket and paths from the env contract, with the seed names as fallback."""
    env = os.environ if env is None else env

    def first(*names: str, default: str) -> str:
        for n in names:
            if env.get(n):
                return env[n]
        return default

    return {
        "socket_path": first("RUNPLANE_FRAMEWORK_SOCKET", "SERVERLESS_FRAMEWORK_SOCKET_PATH", default=DEFAULT_SOCKET),
        "invoke_path": first("RUNPLANE_FRAMEWORK_INVOKE_PATH", "SERVERLESS_FRAMEWORK_INVOKE_PATH", default=DEFAULT_INVOKE_PATH),
        "health_path": first("RUNPLANE_FRAMEWORK_HEALTH_PATH", "SERVERLESS_FRAMEWORK_HEALTH_PATH", default=DEFAULT_HEALTH_PATH),
    }


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True


class Framework:
    """Serves one handler on a unix socket until shutdown()."""

    def __init__(
        self,
        fn: HandlerFunc,
        socket_path: Optional[str] = None,
        invoke_path: Optional[str] = None,
        health_path: Optional[str] = None,
        health: Optional[Callable[[], Optional[str]]] = None,
    ) -> None:
        cfg = config_from_env()
        self.socket_path = socket_path or cfg["socket_path"]
        self.invoke_path = invoke_path or cfg["invoke_path"]
        self.health_path = health_path or cfg["health_path"]
        for name, p in (("invoke path", self.invoke_path), ("health path", self.health_path)):
            if not p.startswith("/"):
                raise ValueError(f"{name} {p!r} must start with /")
        self.fn = fn
        # health returns None when healthy, else the reason it is not.
        self.health = health
        self._server: Optional[_Server] = None
        self._ready = threading.Event()

    def _listen(self) -> _Server:
        os.makedirs(os.path.dirname(self.socket_path) or ".", exist_ok=True)
        try:
            st = os.lstat(self.socket_path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                raise ValueError(f"framework socket path {self.socket_path} exists and is not a socket")
            os.unlink(self.socket_path)  # stale socket of a previous run
        server = _Server(self.socket_path, self._make_handler())
        # Sidecar and framework may run as different users; the Pod's
        # emptyDir is what scopes access.
        os.chmod(self.socket_path, 0o666)
        return server

    def serve_forever(self) -> None:
        self._server = self._listen()
        self._ready.set()
        try:
            self._server.serve_forever(poll_interval=0.2)
        finally:
            self._server.server_close()
            try:
                os.unlink(self.socket_path)
            except FileNotFoundError:
                pass

    def wait_ready(self, timeout: float = 5.0) -> bool:
        return self._ready.wait(timeout)

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()

    def _make_handler(self):
        fw = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: the sidecar reuses connections

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def address_string(self) -> str:
                return "unix"

            def _send(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _path(self) -> str:
                return self.path.split("?", 1)[0]

            def do_GET(self) -> None:
                p = self._path()
                if p == fw.health_path:
                    reason = fw.health() if fw.health else None
                    if reason:
                        self._send(HTTPStatus.SERVICE_UNAVAILABLE, {"error": reason})
                    else:
                        self._send(HTTPStatus.OK, {"status": "ok"})
                elif p == fw.invoke_path:
                    self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"method GET not allowed on {p}: use POST"})
                else:
                    self._send(HTTPStatus.NOT_FOUND, {"error": f"no such path {p}"})

            def do_POST(self) -> None:
                p = self._path()
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if p == fw.health_path:
                    self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"method POST not allowed on {p}: use GET"})
                    return
                if p != fw.invoke_path:
                    self._send(HTTPStatus.NOT_FOUND, {"error": f"no such path {p}"})
                    return
                try:
                    req = Request.from_dict(json.loads(raw or b"null"))
                except (ValueError, TypeError) as e:
                    self._send(HTTPStatus.BAD_REQUEST, {"error": f"decode invocation envelope: {e}"})
                    return
                try:
                    out = fw.fn(req)
                    if out is None:
                        resp = Response()
                    elif isinstance(out, Response):
                        resp = out
                    elif isinstance(out, dict):
                        resp = Response(**out)
                    else:
                        raise TypeError(f"handler returned {type(out).__name__}; want Response, dict or None")
                    body = resp.to_dict()
                    json.dumps(body)  # fail here, not half-way through the answer
                except Exception as e:  # the handler's failure is the invocation's, not the transport's
                    traceback.print_exc()
                    body = Response(statusCode=500, error=f"{type(e).__name__}: {e}").to_dict()
                self._send(HTTPStatus.OK, body)

        return _Handler


def serve(fn: HandlerFunc, **kwargs: Any) -> None:
    """Serve fn until SIGTERM or SIGINT (then finish running requests and exit)."""
    fw = Framework(fn, **kwargs)

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=fw.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"runplane framework: serving on {fw.socket_path} (invoke {fw.invoke_path}, health {fw.health_path})", flush=True)
    fw.serve_forever()


class UnixHTTPConnection:
    """A tiny client for tests and tools: http.client over a unix socket."""

    def __init__(self, socket_path: str, timeout: float = 10.0) -> None:
        import http.client

        class _Conn(http.client.HTTPConnection):
            def connect(self_inner) -> None:  # noqa: N805
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(timeout)
                s.connect(socket_path)
                self_inner.sock = s

        self._conn = _Conn("framework", timeout=timeout)

    def request(self, method: str, path: str, body: Any = None) -> "tuple[int, Any]":
        data = None if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
        headers = {"Content-Type": "application/json"} if data is not None else {}
        self._conn.request(method, path, body=data, headers=headers)
        r = self._conn.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None)

    def close(self) -> None:
        self._conn.close()
