"""runplane framework SDK: serve a handler under the worker sidecar's contract.

The worker sidecar talks to the user's framework over HTTP on a unix socket:
``GET <health path>`` (default ``/healthz``) answers 200 while the framework
can serve; ``POST <invoke path>`` (default ``/invoke``) takes the invocation
envelope and answers ``{statusCode, contentType, headers, body, error}``.

A handler is a plain or an ``async def`` function of one :class:`Request`::

    import runplane_framework as rf

    async def generate(req: rf.Request) -> rf.Response:
        return rf.Response(body={"echo": req.payload})

    if __name__ == "__main__":
        rf.serve(generate)                      # standard library server

    app = rf.asgi_app(generate)                 # or: uvicorn --uds "$RUNPLANE_FRAMEWORK_SOCKET" mod:app

``wrap_asgi(fastapi_app)`` serves an existing ASGI application instead. The
socket and paths come from the env the webhook injects
(``RUNPLANE_FRAMEWORK_SOCKET`` / ``SERVERLESS_FRAMEWORK_SOCKET_PATH`` and the
``*_INVOKE_PATH`` / ``*_HEALTH_PATH`` names), defaulting to the contract's.
"""

from typing import TypeVar

from ._asgi import ASGIApp, asgi_app, wrap_asgi
from ._client import UnixHTTPConnection
from ._dispatch import AsyncHandler, Handler, HealthCheck, ResponseLike, SyncHandler, to_response
from ._envelope import (
    DEFAULT_HEALTH_PATH,
    DEFAULT_INVOKE_PATH,
    DEFAULT_SOCKET,
    VERSION,
    Config,
    Request,
    Response,
    config_from_env,
)
from ._server import Framework, read_chunked, serve
from ._stream import StreamHandler, is_stream_handler

__version__ = "0.2.0"

__all__ = [
    "ASGIApp",
    "AsyncHandler",
    "Config",
    "DEFAULT_HEALTH_PATH",
    "DEFAULT_INVOKE_PATH",
    "DEFAULT_SOCKET",
    "Framework",
    "Handler",
    "HealthCheck",
    "Request",
    "Response",
    "ResponseLike",
    "StreamHandler",
    "SyncHandler",
    "UnixHTTPConnection",
    "VERSION",
    "asgi_app",
    "config_from_env",
    "handler",
    "is_stream_handler",
    "read_chunked",
    "serve",
    "to_response",
    "wrap_asgi",
]

_H = TypeVar("_H", bound=Handler)


def handler(fn: _H) -> _H:
    """Mark fn as an invocation handler (documentation only; any callable works)."""
    return fn
