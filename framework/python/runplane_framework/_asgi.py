"""The contract as an ASGI application, for any ASGI server (uvicorn --uds).

``asgi_app(handler)`` serves a runplane handler; ``wrap_asgi(app)`` serves an
existing ASGI application (FastAPI, Starlette, ...) behind the contract: each
invocation becomes one HTTP request to that application, in process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import traceback
from typing import Any, Awaitable, Callable, Dict, List, MutableMapping, Optional, Tuple

from ._dispatch import Dispatcher, Handler, HealthCheck, checked, failure
from ._envelope import TRACEPARENT_HEADER, Config, Request, config_from_env, traceparent
from ._stream import chunk_bytes, is_stream_handler, sse_event

# The ASGI 3.0 callables (https://asgi.readthedocs.io/en/latest/specs/main.html).
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_JSON = "application/json"


async def _send_json(send: Send, status: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", _JSON.encode()), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


async def _read_body(receive: Receive) -> Optional[bytes]:
    """The whole request body (the server has undone any chunking); None if the peer left."""
    parts: List[bytes] = []
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return None
        parts.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            return b"".join(parts)


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif msg["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


Invoke = Callable[[Request], Awaitable[Dict[str, Any]]]
AsyncHealth = Callable[[], Awaitable[Optional[str]]]


class _ContractApp:
    """Routes the contract's two paths; invoke runs with cancellation on disconnect."""

    def __init__(self, config: Config, invoke: Invoke, health: AsyncHealth,
                 lifespan: Optional[ASGIApp] = None) -> None:
        self.config = config
        self._invoke = invoke
        self._health = health
        self._lifespan = lifespan
        # A generator handler (asgi_app): its chunks are streamed.
        self.stream_fn: Optional[Any] = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            if self._lifespan is not None:
                await self._lifespan(scope, receive, send)
            else:
                await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise ValueError(f"runplane framework: unsupported ASGI scope type {scope['type']!r}")
        path, method = scope["path"], scope["method"]
        if path == self.config.health_path:
            if method not in ("GET", "HEAD"):
                await _send_json(send, 405, {"error": f"method {method} not allowed on {path}: use GET"})
                return
            reason = await self._health()
            if reason:
                await _send_json(send, 503, {"error": reason})
            else:
                await _send_json(send, 200, {"status": "ok"})
            return
        if path != self.config.invoke_path:
            await _send_json(send, 404, {"error": f"no such path {path}"})
            return
        if method != "POST":
            await _send_json(send, 405, {"error": f"method {method} not allowed on {path}: use POST"})
            return
        raw = await _read_body(receive)
        if raw is None:
            return
        try:
            req = Request.from_dict(json.loads(raw or b"null"))
            req.traceparent = traceparent(_header(scope, TRACEPARENT_HEADER))
        except (ValueError, TypeError) as e:
            await _send_json(send, 400, {"error": f"decode invocation envelope: {e}"})
            return
        if self.stream_fn is not None:
            await _stream_asgi(self.stream_fn, req, receive, send)
            return
        work = asyncio.ensure_future(self._invoke(req))
        hangup = asyncio.ensure_future(_until_disconnect(receive))
        gave_up = False
        try:
            await asyncio.wait({work, hangup}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hangup.cancel()
            if not work.done():
                # The sidecar gave up (cancel, timeout), or the server is
                # stopping: tell the handler; nobody reads an answer.
                gave_up = True
                req.cancelled.set()
                work.cancel()
        if gave_up:
            return
        await _send_json(send, 200, work.result())


def asgi_app(
    fn: Handler,
    *,
    health: Optional[HealthCheck] = None,
    config: Optional[Config] = None,
    max_sync_workers: int = 64,
) -> ASGIApp:
    """An ASGI application serving handler fn under the contract.

    Serve it with any ASGI server on the framework socket, e.g.
    ``uvicorn --uds "$RUNPLANE_FRAMEWORK_SOCKET" mymodule:app``. Paths come
    from config (default: the env contract). A sync fn runs in a pool of up to
    max_sync_workers threads, an async one on the server's loop.
    """
    dispatcher = Dispatcher(fn)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_sync_workers, thread_name_prefix="runplane-handler")

    async def invoke(req: Request) -> Dict[str, Any]:
        return await dispatcher.run_async(req, pool)

    async def check() -> Optional[str]:
        return health() if health else None

    app = _ContractApp(config or config_from_env(), invoke, check)
    if is_stream_handler(fn):
        app.stream_fn = fn
    return app


def wrap_asgi(
    app: ASGIApp,
    *,
    default_path: str = "/",
    app_health_path: Optional[str] = None,
    config: Optional[Config] = None,
) -> ASGIApp:
    """Serve an existing ASGI application (e.g. FastAPI) under the contract.

    Each invocation becomes one request to app: method ``attributes["method"]``
    (default POST), path ``attributes["path"]`` (default default_path, a query
    string allowed), the envelope's headers, and the payload as the body
    (JSON-encoded, or as is when it is a string and contentType is not JSON).
    The answer becomes the response envelope: its status, content type and
    headers, the body decoded as JSON when the content type is JSON (else as
    text), and ``error`` set for a status of 500 or more. The framework's
    health path asks app's GET app_health_path when given (200: healthy).
    The app's lifespan (startup: load the model) runs as under any server.
    """
    cfg = config or config_from_env()

    async def invoke(req: Request) -> Dict[str, Any]:
        try:
            return await _forward(app, req, default_path)
        except Exception as e:
            # An app's unhandled exception (FastAPI/Starlette answer a bare
            # 500 and re-raise it) is the invocation's failure, with its type
            # and message as a plain handler's, not the transport's.
            return checked(failure(e))

    async def check() -> Optional[str]:
        if app_health_path is None:
            return None
        status, _, body = await _call(app, "GET", app_health_path, [], b"")
        return None if status == 200 else f"{app_health_path}: HTTP {status}: {body[:200].decode(errors='replace')}"

    return _ContractApp(cfg, invoke, check, lifespan=app)


def _header(scope: Scope, name: str) -> Optional[str]:
    """The first value of request header name (lower case) in an ASGI scope."""
    key = name.encode()
    return next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == key), None)


def _is_json(content_type: str) -> bool:
    ct = content_type.split(";", 1)[0].strip().lower()
    return ct == _JSON or ct.endswith("+json")


async def _forward(app: ASGIApp, req: Request, default_path: str) -> Dict[str, Any]:
    method = req.attributes.get("method", "POST").upper()
    path = req.attributes.get("path") or default_path
    content_type = req.contentType or _JSON
    if isinstance(req.payload, str) and not _is_json(content_type):
        body = req.payload.encode()
    elif req.payload is None:
        body = b""
    else:
        body = json.dumps(req.payload).encode()
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in req.headers.items()
               if k.lower() not in ("content-type", "content-length", "host")]
    if req.traceparent:  # the app's own tracing (e.g. OpenTelemetry's ASGI middleware) continues it
        headers = [h for h in headers if h[0] != TRACEPARENT_HEADER.encode()]
        headers.append((TRACEPARENT_HEADER.encode(), req.traceparent.encode("latin-1")))
    headers += [(b"content-type", content_type.encode("latin-1")), (b"host", b"framework"),
                (b"x-runplane-invocation-id", req.invocationID.encode("latin-1"))]
    status, resp_headers, data = await _call(app, method, path, headers, body)
    ct = next((v for k, v in resp_headers if k == "content-type"), "")
    out: Dict[str, Any] = {"statusCode": status}
    if ct:
        out["contentType"] = ct
    passed = {k: v for k, v in resp_headers if k not in ("content-type", "content-length")}
    if passed:
        out["headers"] = passed
    if data:
        if _is_json(ct):
            try:
                out["body"] = json.loads(data)
            except ValueError:
                out["body"] = data.decode(errors="replace")
        else:
            out["body"] = data.decode(errors="replace")
    if status >= 500:
        out["error"] = f"{method} {path}: HTTP {status}"
    return out


async def _call(app: ASGIApp, method: str, path: str, headers: List[Tuple[bytes, bytes]],
                body: bytes) -> Tuple[int, List[Tuple[str, str]], bytes]:
    """One in-process HTTP request to app. Cancelling the caller's task cancels app's."""
    raw_path, _, query = path.partition("?")
    scope: Scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": method, "scheme": "http", "path": raw_path, "raw_path": raw_path.encode(),
        "query_string": query.encode(), "root_path": "", "headers": headers,
        "client": None, "server": ("framework", 80),
    }
    sent_body = False
    gone = asyncio.Event()

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()  # an app that listens for a disconnect gets one when done
        return {"type": "http.disconnect"}

    status = 500
    resp_headers: List[Tuple[str, str]] = []
    parts: List[bytes] = []

    async def send(msg: Message) -> None:
        nonlocal status
        if msg["type"] == "http.response.start":
            status = int(msg["status"])
            resp_headers.extend((bytes(k).decode("latin-1").lower(), bytes(v).decode("latin-1"))
                                for k, v in msg.get("headers", []))
        elif msg["type"] == "http.response.body":
            parts.append(bytes(msg.get("body", b"")))
            if not msg.get("more_body", False):
                gone.set()

    try:
        await app(scope, receive, send)
    finally:
        gone.set()
    return status, resp_headers, b"".join(parts)


async def _stream_asgi(fn: Any, req: Request, receive: Receive, send: Send) -> None:
    """Stream a generator handler's chunks as server-sent events (see _stream).

    A sync generator advances in the default executor; when the sidecar
    hangs up, req.cancelled is set and the generator is closed.
    """
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]})
    hangup = asyncio.ensure_future(_until_disconnect(receive))
    gen = fn(req)
    loop = asyncio.get_running_loop()
    done = object()

    async def next_item() -> Any:
        if inspect.isasyncgen(gen):
            try:
                return await gen.__anext__()
            except StopAsyncIteration:
                return done
        return await loop.run_in_executor(None, next, gen, done)

    try:
        while True:
            step = asyncio.ensure_future(next_item())
            await asyncio.wait({step, hangup}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                req.cancelled.set()
                step.cancel()
                return
            try:
                item = step.result()
            except Exception as e:
                traceback.print_exception(type(e), e, e.__traceback__)
                err = sse_event(f"{type(e).__name__}: {e}".encode("utf-8"), "error")
                await send({"type": "http.response.body", "body": err, "more_body": True})
                break
            if item is done:
                break
            await send({"type": "http.response.body", "body": sse_event(chunk_bytes(item)), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        hangup.cancel()
        if inspect.isasyncgen(gen):
            await gen.aclose()
        else:
            try:
                gen.close()
            except ValueError:
                pass  # still running in the executor (a hangup): it stops at its next yield's write
