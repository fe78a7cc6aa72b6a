"""Streaming handlers: a generator (or ``async def`` generator) of chunks.

A handler that yields answers ``POST /invoke`` with ``text/event-stream``:
every yielded item is one chunk, sent to the sidecar at once (chunked
HTTP), which relays it to the caller as it arrives. ``str`` is sent as
UTF-8, ``bytes`` as they are, anything else as JSON. An exception ends the
stream with an ``error`` event: the invocation fails with its text, after
the chunks already sent. When the sidecar hangs up (a cancel, a timeout)
the next write fails: ``req.cancelled`` is set and the generator is closed
(``GeneratorExit`` at its ``yield``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import traceback
from typing import Any, AsyncIterator, Callable, Iterator, Union

from ._envelope import Request

StreamHandler = Callable[[Request], Union[Iterator[Any], AsyncIterator[Any]]]


def is_stream_handler(fn: Any) -> bool:
    """Whether fn is a generator function (sync or async): a streaming handler."""
    call = getattr(fn, "__call__", None)
    return any(inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f) for f in (fn, call))


def chunk_bytes(item: Any) -> bytes:
    """One yielded item as chunk bytes."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    return json.dumps(item).encode("utf-8")


def sse_event(data: bytes, event: str = "") -> bytes:
    """data as one server-sent event: every line a data field."""
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    out = f"event: {event}\n" if event else ""
    out += "".join(f"data: {line}\n" for line in text.split("\n"))
    return (out + "\n").encode("utf-8")


class _Hangup(Exception):
    pass


def stream(fn: StreamHandler, req: Request, write: Callable[[bytes], None], loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
    """Run a streaming handler, writing each chunk as an SSE event with write.

    write raises OSError when the peer is gone; loop gives the event loop an
    async generator runs on.
    """

    def send(data: bytes, event: str = "") -> None:
        try:
            write(sse_event(data, event))
        except OSError as e:
            req.cancelled.set()
            raise _Hangup() from e

    gen = fn(req)
    try:
        if inspect.isasyncgen(gen):
            agen = gen
            lp = loop()
            try:
                while True:
                    fut = asyncio.run_coroutine_threadsafe(agen.__anext__(), lp)
                    try:
                        item = fut.result()
                    except StopAsyncIteration:
                        break
                    send(chunk_bytes(item))
            finally:
                asyncio.run_coroutine_threadsafe(agen.aclose(), lp).result()
        else:
            try:
                for item in gen:  # type: ignore[union-attr]
                    send(chunk_bytes(item))
            finally:
                gen.close()  # type: ignore[union-attr]
    except _Hangup:
        return
    except Exception as e:
        traceback.print_exception(type(e), e, e.__traceback__)
        try:
            send(f"{type(e).__name__}: {e}".encode("utf-8"), "error")
        except _Hangup:
            pass
