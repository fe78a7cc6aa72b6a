"""A typed streaming handler: a generator yields the output as it is made.

    RUNPLANE_FRAMEWORK_SOCKET=/tmp/f.sock python3 -m examples.streamer

``make python-test`` type-checks this file with ``mypy --strict``: a generator
(and an ``async def`` generator) is a handler ``serve`` and ``asgi_app`` accept.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Iterator

import runplane_framework as rf


@rf.handler
def tokens(req: rf.Request) -> Iterator[str]:
    """Yield the prompt's words one by one."""
    for word in str(req.payload.get("prompt", "")).split():
        if req.cancelled.is_set():
            return
        yield word + " "


@rf.handler
async def atokens(req: rf.Request) -> AsyncIterator[str]:
    """The same as an async generator."""
    for word in str(req.payload.get("prompt", "")).split():
        await asyncio.sleep(0)
        yield word + " "


app = rf.asgi_app(atokens)

if __name__ == "__main__":
    rf.serve(tokens)
