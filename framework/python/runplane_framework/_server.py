"""The built-in server: HTTP/1.1 on the unix socket, standard library only."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import select
import signal
import socket
import socketserver
import stat
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from types import FrameType
from typing import Any, BinaryIO, Callable, Dict, Optional, Type

from ._calls import (
    ATTACH_HEADER,
    ATTACH_ONLY,
    ATTACH_UNKNOWN,
    CANCEL_HEADER,
    CAPABILITIES_HEADER,
    CAPABILITY_IDEMPOTENT_INVOKE,
    DEFAULT_DETACH_GRACE,
    Call,
    Calls,
)
from ._dispatch import Dispatcher, Handler, HealthCheck
from ._envelope import TRACEPARENT_HEADER, Config, Request, config_from_env, traceparent
from ._stream import is_stream_handler, stream

# Bounds a request body (the ingress's own limit is lower); chunk-size lines
# and trailers are bounded too, so a broken peer cannot make us buffer
# without end.
MAX_BODY_BYTES = 64 << 20
_MAX_LINE = 4096


class BodyError(ValueError):
    """A request body that cannot be read (bad chunked framing, too large)."""


def read_chunked(rfile: BinaryIO, limit: int = MAX_BODY_BYTES) -> bytes:
    """Read a Transfer-Encoding: chunked body (RFC 9112 section 7.1).

    Hand-written because http.server leaves request bodies to its users and
    has no chunked decoder (http.client only decodes chunked responses).
    Chunk extensions and trailer fields are read and ignored.
    """
    out = bytearray()
    while True:
        line = rfile.readline(_MAX_LINE + 1)
        if not line.endswith(b"\n"):
            raise BodyError("chunked body: truncated or overlong chunk-size line")
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BodyError(f"chunked body: bad chunk size {size_text[:32]!r}") from None
        if size < 0:
            raise BodyError("chunked body: negative chunk size")
        if size == 0:
            break
        if len(out) + size > limit:
            raise BodyError(f"request body exceeds {limit} bytes")
        chunk = rfile.read(size)
        if len(chunk) != size:
            raise BodyError("chunked body: connection closed inside a chunk")
        out += chunk
        if rfile.readline(3) not in (b"\r\n", b"\n"):
            raise BodyError("chunked body: chunk not followed by CRLF")
    for _ in range(100):  # trailer section, up to the empty line
        line = rfile.readline(_MAX_LINE + 1)
        if line in (b"\r\n", b"\n"):
            return bytes(out)
        if not line.endswith(b"\n"):
            raise BodyError("chunked body: truncated trailer section")
    raise BodyError("chunked body: too many trailer fields")


def wait_or_hangup(conn: socket.socket, done: threading.Event, wake: socket.socket) -> bool:
    """Block until done is set (True) or the peer closes conn (False).

    The sidecar cancels an invocation by closing its connection; with the
    request read in full, conn turning readable means EOF or a reset. wake
    is the read end of a socketpair written to when done is set, so no
    polling interval delays either outcome.
    """
    while not done.is_set():
        readable, _, _ = select.select([conn, wake], [], [])
        if conn in readable:
            try:
                peek = conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                return False
            if not peek:
                return False
            # Bytes of a pipelined next request: the peer is still there;
            # from now on only done can end the wait.
            done.wait()
            return True
    return True


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True


class Framework:
    """Serves one handler (sync or ``async def``) on a unix socket until shutdown().

    Each connection gets a thread. A sync handler runs in a thread of its
    own, an async one on a shared event loop (one thread for all of them);
    the connection's thread watches the socket meanwhile and, when the
    sidecar hangs up, sets ``req.cancelled`` and cancels an async handler.

    It offers the idempotent invoke (``_calls``): a call the sidecar names
    with an ``attempt`` runs once; a repeated POST of it waits for its
    outcome, and a hang-up detaches from it rather than cancelling it
    (``detach_grace`` seconds, then it is cancelled). A streaming handler
    serves the plain contract.
    """

    def __init__(
        self,
        fn: Handler,
        socket_path: Optional[str] = None,
        invoke_path: Optional[str] = None,
        health_path: Optional[str] = None,
        health: Optional[HealthCheck] = None,
        detach_grace: float = DEFAULT_DETACH_GRACE,
    ) -> None:
        env = config_from_env()
        self.config = Config(
            socket_path=socket_path or env.socket_path,
            invoke_path=invoke_path or env.invoke_path,
            health_path=health_path or env.health_path,
        )
        self.dispatcher = Dispatcher(fn)
        self.health = health
        self.calls = Calls(detach_grace=detach_grace)
        self.idempotent = not is_stream_handler(fn)
        self._server: Optional[_Server] = None
        self._ready = threading.Event()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_lock = threading.Lock()

    @property
    def socket_path(self) -> str:
        return self.config.socket_path

    @property
    def invoke_path(self) -> str:
        return self.config.invoke_path

    @property
    def health_path(self) -> str:
        return self.config.health_path

    def _listen(self) -> _Server:
        path = self.socket_path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                raise ValueError(f"framework socket path {path} exists and is not a socket")
            os.unlink(path)  # stale socket of a previous run
        server = _Server(path, _handler_class(self))
        # Sidecar and framework may run as different users; the Pod's
        # emptyDir is what scopes access.
        os.chmod(path, 0o666)
        return server

    def serve_forever(self) -> None:
        self._server = self._listen()
        self._ready.set()
        try:
            self._server.serve_forever(poll_interval=0.2)
        finally:
            self._server.server_close()
            self._stop_loop()
            try:
                os.unlink(self.socket_path)
            except FileNotFoundError:
                pass

    def wait_ready(self, timeout: float = 5.0) -> bool:
        return self._ready.wait(timeout)

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()

    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop async handlers run on (started on first use)."""
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="runplane-async-handlers", daemon=True).start()
                self._loop = loop
            return self._loop

    def _stop_loop(self) -> None:
        with self._loop_lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop = None

    def start(self, req: Request, finish: Callable[[Dict[str, Any]], None]) -> Callable[[], None]:
        """Start the handler for req, detached from any connection; finish gets its outcome.

        Returns the function that cancels it.
        """
        if self.dispatcher.is_async:
            fut = asyncio.run_coroutine_threadsafe(self.dispatcher.run_async(req), self.loop())

            def done(f: "concurrent.futures.Future[Dict[str, Any]]") -> None:
                if f.cancelled():
                    finish({"statusCode": 500, "error": "cancelled"})
                else:
                    finish(f.result())

            fut.add_done_callback(done)

            def cancel_async() -> None:
                req.cancelled.set()
                fut.cancel()

            return cancel_async

        threading.Thread(target=lambda: finish(self.dispatcher.run_sync(req)), name=f"invoke-{req.invocationID}", daemon=True).start()
        return req.cancelled.set

    def attach(self, call: Call, conn: socket.socket) -> Optional[Dict[str, Any]]:
        """Wait for call's outcome; None when the peer hung up first (the call goes on)."""
        wake_r, wake_w = socket.socketpair()

        def wake() -> None:
            try:
                wake_w.send(b"x")
            except OSError:
                pass

        call.on_done(wake)
        try:
            if wait_or_hangup(conn, call.done, wake_r):
                return call.outcome
            return None
        finally:
            wake_r.close()
            wake_w.close()

    def invoke(self, req: Request, conn: socket.socket) -> Optional[Dict[str, Any]]:
        """Run the handler for req; None when the peer hung up first (cancelled)."""
        done = threading.Event()
        wake_r, wake_w = socket.socketpair()
        result: Dict[str, Any] = {}

        def finished() -> None:
            done.set()
            try:
                wake_w.send(b"x")
            except OSError:
                pass

        def run_sync() -> None:
            try:
                result.update(self.dispatcher.run_sync(req))
            finally:
                finished()

        try:
            fut = None
            if self.dispatcher.is_async:
                fut = asyncio.run_coroutine_threadsafe(self.dispatcher.run_async(req), self.loop())
                fut.add_done_callback(lambda _: finished())
            else:
                threading.Thread(target=run_sync, name=f"invoke-{req.invocationID}", daemon=True).start()
            if wait_or_hangup(conn, done, wake_r):
                if fut is not None:
                    return fut.result()
                return result
            req.cancelled.set()
            if fut is not None:
                fut.cancel()
            return None
        finally:
            wake_r.close()
            wake_w.close()


def _handler_class(fw: Framework) -> Type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the sidecar reuses connections

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def address_string(self) -> str:
            return "unix"

        def _send(self, status: int, obj: Any, headers: Optional[Dict[str, str]] = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, req: Request) -> None:
            # A streamed answer: chunked transfer encoding, one chunk per event.
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()

            def write(data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            stream(fw.dispatcher.fn, req, write, fw.loop)  # type: ignore[arg-type]
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True

        def _path(self) -> str:
            return self.path.split("?", 1)[0]

        def _body(self) -> bytes:
            te = (self.headers.get("Transfer-Encoding") or "").strip().lower()
            if te:
                if te != "chunked":
                    self.close_connection = True
                    raise BodyError(f"unsupported Transfer-Encoding {te!r}")
                try:
                    return read_chunked(self.rfile)
                except BodyError:
                    self.close_connection = True  # the framing is lost
                    raise
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                self.close_connection = True
                raise BodyError("bad Content-Length") from None
            if length < 0 or length > MAX_BODY_BYTES:
                self.close_connection = True
                raise BodyError(f"Content-Length {length}: must be between 0 and {MAX_BODY_BYTES}")
            return self.rfile.read(length) if length else b""

        def _idempotent(self, req: Request) -> None:
            key = (req.invocationID, req.attempt)
            unknown = f"no call of invocation {req.invocationID} attempt {req.attempt} is known here"
            if (self.headers.get(CANCEL_HEADER) or "").strip().lower() == "true":
                if fw.calls.cancel(key):
                    self._send(HTTPStatus.OK, {"status": "cancelled"})
                else:
                    self._send(HTTPStatus.NOT_FOUND, {"error": unknown})
                return
            begin = (self.headers.get(ATTACH_HEADER) or "").strip().lower() != ATTACH_ONLY
            call = fw.calls.start(key, begin, lambda finish: fw.start(req, finish))
            if call is None:
                # A re-attach to a call this framework does not know: never
                # started here (the sidecar holds no payload for it).
                self._send(HTTPStatus.NOT_FOUND, {"error": unknown}, {ATTACH_HEADER: ATTACH_UNKNOWN})
                return
            try:
                body = fw.attach(call, self.connection)
            finally:
                fw.calls.release(call)
            if body is None:
                self.close_connection = True  # detached: nobody reads an answer
                return
            self._send(HTTPStatus.OK, body)

        def do_GET(self) -> None:
            p = self._path()
            if p == fw.health_path:
                reason = fw.health() if fw.health else None
                extra = {CAPABILITIES_HEADER: CAPABILITY_IDEMPOTENT_INVOKE} if fw.idempotent else None
                if reason:
                    self._send(HTTPStatus.SERVICE_UNAVAILABLE, {"error": reason}, extra)
                else:
                    self._send(HTTPStatus.OK, {"status": "ok"}, extra)
            elif p == fw.invoke_path:
                self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"method GET not allowed on {p}: use POST"})
            else:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no such path {p}"})

        def do_POST(self) -> None:
            p = self._path()
            try:
                raw = self._body()
            except BodyError as e:
                self._send(HTTPStatus.BAD_REQUEST, {"error": f"read invocation envelope: {e}"})
                return
            if p == fw.health_path:
                self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"method POST not allowed on {p}: use GET"})
                return
            if p != fw.invoke_path:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no such path {p}"})
                return
            try:
                req = Request.from_dict(json.loads(raw or b"null"))
                req.traceparent = traceparent(self.headers.get(TRACEPARENT_HEADER))
            except (ValueError, TypeError) as e:
                self._send(HTTPStatus.BAD_REQUEST, {"error": f"decode invocation envelope: {e}"})
                return
            if is_stream_handler(fw.dispatcher.fn):
                self._stream(req)
                return
            if req.attempt:
                self._idempotent(req)
                return
            body = fw.invoke(req, self.connection)
            if body is None:
                self.close_connection = True  # the sidecar gave up: nobody reads an answer
                return
            self._send(HTTPStatus.OK, body)

    return _Handler


def serve(fn: Handler, **kwargs: Any) -> None:
    """Serve fn until SIGTERM or SIGINT (then finish running requests and exit)."""
    fw = Framework(fn, **kwargs)

    def stop(signum: int, frame: Optional[FrameType]) -> None:
        threading.Thread(target=fw.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"runplane framework: serving on {fw.socket_path} (invoke {fw.invoke_path}, health {fw.health_path})", flush=True)
    fw.serve_forever()
