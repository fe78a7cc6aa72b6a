"""The contract's two JSON envelopes and the env that names the socket and paths."""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

VERSION = "v1"
DEFAULT_SOCKET = "/tmp/serverless-framework/framework.sock"
DEFAULT_INVOKE_PATH = "/invoke"
DEFAULT_HEALTH_PATH = "/healthz"


@dataclasses.dataclass
class Request:
    """The invocation envelope the sidecar posts.

    ``cancelled`` is not part of the envelope: it is set when the sidecar gives
    up on the invocation (a caller's cancel, ``timeoutSeconds``), which it
    signals by closing the connection. A sync handler polls
    ``req.cancelled.is_set()`` or waits on ``req.cancelled.wait(t)``; an
    ``async def`` handler is also cancelled (``asyncio.CancelledError`` at its
    next ``await``).
    """

    invocationID: str
    # The attempt of the invocation this call runs (from 1): with
    # invocationID the key of the idempotent invoke (_calls).
    attempt: int = 0
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
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event, compare=False, repr=False)
    # traceparent is not part of the envelope either: the W3C trace context
    # the sidecar sends in the request's traceparent header ("" when none),
    # the parent of spans the handler starts (README "Traces").
    traceparent: str = dataclasses.field(default="", compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: Any) -> "Request":
        if not isinstance(d, dict):
            raise ValueError("invocation envelope must be a JSON object")
        if not d.get("invocationID"):
            raise ValueError("invocation envelope: field invocationID must not be empty")
        # Unknown fields are ignored so the sidecar may add fields additively.
        return cls(**{k: v for k, v in d.items() if k in ENVELOPE_FIELDS and v is not None})

    def to_dict(self) -> Dict[str, Any]:
        """The envelope as JSON-ready data (without ``cancelled``)."""
        return {name: getattr(self, name) for name in ENVELOPE_FIELDS}


# The JSON fields of Request, in envelope order.
ENVELOPE_FIELDS: Tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Request) if f.name not in ("cancelled", "traceparent"))

TRACEPARENT_HEADER = "traceparent"
# A traceparent longer than this is ignored (version 00 has 55 characters).
MAX_TRACEPARENT = 128
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[0-9a-zA-Z-]*)?")


def traceparent(value: Optional[str]) -> str:
    """The W3C traceparent header value if well-formed and bounded, else ""."""
    if not value or len(value) > MAX_TRACEPARENT or not _TRACEPARENT.fullmatch(value.strip()):
        return ""
    return value.strip()


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


@dataclasses.dataclass(frozen=True)
class Config:
    """Where a framework listens: the socket and the two paths of the contract."""

    socket_path: str = DEFAULT_SOCKET
    invoke_path: str = DEFAULT_INVOKE_PATH
    health_path: str = DEFAULT_HEALTH_PATH

    def __post_init__(self) -> None:
        for name, p in (("invoke path", self.invoke_path), ("health path", self.health_path)):
            if not p.startswith("/"):
                raise ValueError(f"{name} {p!r} must start with /")


def config_from_env(env: Optional[Mapping[str, str]] = None) -> Config:
    """Socket and paths from the env contract, with the seed names as fallback."""
    src: Mapping[str, str] = os.environ if env is None else env

    def first(*names: str, default: str) -> str:
        for n in names:
            v = src.get(n)
            if v:
                return v
        return default

    return Config(
        socket_path=first("RUNPLANE_FRAMEWORK_SOCKET", "SERVERLESS_FRAMEWORK_SOCKET_PATH", default=DEFAULT_SOCKET),
        invoke_path=first("RUNPLANE_FRAMEWORK_INVOKE_PATH", "SERVERLESS_FRAMEWORK_INVOKE_PATH", default=DEFAULT_INVOKE_PATH),
        health_path=first("RUNPLANE_FRAMEWORK_HEALTH_PATH", "SERVERLESS_FRAMEWORK_HEALTH_PATH", default=DEFAULT_HEALTH_PATH),
    )
