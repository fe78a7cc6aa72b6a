"""Handler dispatch shared by the built-in server and the ASGI app.

A handler is a plain or an ``async def`` function of one Request. Each kind
of handler has one entry in ``_KINDS`` (how to recognise it, how to run it
to a Response); another kind (e.g. a generator that streams) is one more
entry there, and both servers pick it up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import json
import traceback
from typing import Any, Awaitable, Callable, Dict, Optional, Union

from ._envelope import Request, Response
from ._stream import StreamHandler

ResponseLike = Union[Response, Dict[str, Any], None]
SyncHandler = Callable[[Request], ResponseLike]
AsyncHandler = Callable[[Request], Awaitable[ResponseLike]]
# Every kind serve, Framework and asgi_app accept: a streaming (generator)
# handler too, so a typed generator passes mypy --strict where it is served.
Handler = Union[SyncHandler, AsyncHandler, StreamHandler]
# Health returns None when healthy, else the reason it is not.
HealthCheck = Callable[[], Optional[str]]


def to_response(out: Any) -> Response:
    """A handler's return value as a Response (TypeError for anything else)."""
    if out is None:
        return Response()
    if isinstance(out, Response):
        return out
    if isinstance(out, dict):
        known = {f.name for f in dataclasses.fields(Response)}
        unknown = sorted(set(out) - known)
        if unknown:
            raise TypeError(f"handler returned a dict with unknown fields {unknown}; want {sorted(known)}")
        return Response(**out)
    raise TypeError(f"handler returned {type(out).__name__}; want Response, dict or None")


def failure(e: BaseException) -> Response:
    """The handler's failure is the invocation's, not the transport's: statusCode 500 + error."""
    traceback.print_exception(type(e), e, e.__traceback__)
    return Response(statusCode=500, error=f"{type(e).__name__}: {e}")


def checked(resp: Response) -> Dict[str, Any]:
    """resp as envelope data, JSON-encodable (fail here, not half-way through the answer)."""
    body = resp.to_dict()
    json.dumps(body)
    return body


def _sync_run(fn: Handler, req: Request) -> ResponseLike:
    return fn(req)  # type: ignore[return-value]


async def _async_run(fn: Handler, req: Request) -> ResponseLike:
    out = fn(req)
    if not inspect.isawaitable(out):
        raise TypeError(f"async handler returned {type(out).__name__}, not an awaitable")
    return await out  # type: ignore[no-any-return]


@dataclasses.dataclass(frozen=True)
class _Kind:
    name: str
    matches: Callable[[Handler], bool]
    # Exactly one of sync/asynchronous runs a handler of this kind.
    sync: Optional[Callable[[Handler, Request], ResponseLike]] = None
    asynchronous: Optional[Callable[[Handler, Request], Awaitable[ResponseLike]]] = None


def _is_async(fn: Handler) -> bool:
    # A callable object whose __call__ is async counts too.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


_KINDS = (
    _Kind("async", _is_async, asynchronous=_async_run),
    _Kind("sync", lambda fn: True, sync=_sync_run),
)


class Dispatcher:
    """Runs one handler, whatever its kind, to a JSON-ready response envelope."""

    def __init__(self, fn: Handler) -> None:
        if not callable(fn):
            raise TypeError(f"handler {fn!r} is not callable")
        self.fn = fn
        self.kind = next(k for k in _KINDS if k.matches(fn))

    @property
    def is_async(self) -> bool:
        return self.kind.asynchronous is not None

    def run_sync(self, req: Request) -> Dict[str, Any]:
        """Run a sync handler in this thread."""
        assert self.kind.sync is not None, f"{self.kind.name} handler run as sync"
        try:
            return checked(to_response(self.kind.sync(self.fn, req)))
        except Exception as e:
            return checked(failure(e))

    async def run_async(self, req: Request, executor: Optional[concurrent.futures.Executor] = None) -> Dict[str, Any]:
        """Run the handler on the running loop; a sync one in executor.

        A cancel of the awaiting task reaches an async handler as
        asyncio.CancelledError; req.cancelled is the signal for both kinds.
        """
        try:
            if self.kind.asynchronous is not None:
                out = await self.kind.asynchronous(self.fn, req)
            else:
                sync = self.kind.sync
                assert sync is not None
                out = await asyncio.get_running_loop().run_in_executor(executor, sync, self.fn, req)
            return checked(to_response(out))
        except asyncio.CancelledError:
            req.cancelled.set()
            raise
        except Exception as e:
            return checked(failure(e))
