"""Tests of the SDK's handler kinds, cancellation, chunked bodies and ASGI serving.

Run: python3 -m unittest discover -s framework/python -v (make test uses Debian's
/usr/bin/python3, which has uvicorn and FastAPI from hack/install-deps.sh).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import runplane_framework as rf

HERE = os.path.dirname(os.path.abspath(__file__))
# make test sets this: a missing uvicorn/FastAPI is then a failure, not a skip.
STRICT = os.environ.get("RUNPLANE_PYTHON_STRICT") == "1"


def optional(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        if STRICT:
            raise
        return None


uvicorn = optional("uvicorn")
fastapi = optional("fastapi")


def tempdir(tc: unittest.TestCase) -> str:
    d = tempfile.mkdtemp(prefix="rppy")
    tc.addCleanup(shutil.rmtree, d, True)
    return d


def raw_post(sock_path: str, body: bytes, chunked: bool = False) -> socket.socket:
    """Send one POST /invoke on a fresh connection and return it unread."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    if chunked:
        head = b"POST /invoke HTTP/1.1\r\nHost: f\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        s.sendall(head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    else:
        s.sendall(b"POST /invoke HTTP/1.1\r\nHost: f\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    return s


class Server:
    """One way of serving an SDK handler on a temp socket (built-in or uvicorn)."""

    def __init__(self, name: str, start: Callable[[unittest.TestCase, rf.Handler, str], None]) -> None:
        self.name, self.start = name, start


def serve_builtin(tc: unittest.TestCase, fn: rf.Handler, sock: str) -> None:
    fw = rf.Framework(fn, socket_path=sock)
    t = threading.Thread(target=fw.serve_forever, daemon=True)
    t.start()
    tc.assertTrue(fw.wait_ready(), "framework did not start")
    tc.addCleanup(t.join, 5)
    tc.addCleanup(fw.shutdown)


def serve_uvicorn(tc: unittest.TestCase, app: rf.ASGIApp, sock: str) -> None:
    """uvicorn in a thread of this process (no signal handlers off the main thread)."""
    server = uvicorn.Server(uvicorn.Config(app, uds=sock, log_level="warning", lifespan="on"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not server.started:
        tc.assertLess(time.monotonic(), deadline, "uvicorn did not start")
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        t.join(10)

    tc.addCleanup(stop)


SERVERS = [
    Server("builtin", serve_builtin),
    Server("uvicorn", lambda tc, fn, sock: serve_uvicorn(tc, rf.asgi_app(fn, config=rf.Config(socket_path=sock)), sock)),
]


class TestHandlers(unittest.TestCase):
    """Both servers: sync and async handlers, cancellation, chunked bodies."""

    def each_server(self) -> Iterator[Tuple[Server, str]]:
        for srv in SERVERS:
            if srv.name == "uvicorn" and uvicorn is None:
                self.skipTest("uvicorn not installed (python3-uvicorn)")
            with self.subTest(srv.name):
                yield srv, os.path.join(tempdir(self), srv.name + ".sock")

    def test_sync_and_async_handlers(self) -> None:
        def sync(req: rf.Request) -> rf.Response:
            return rf.Response(body={"kind": "sync", "payload": req.payload})

        async def asynchronous(req: rf.Request) -> Dict[str, Any]:
            await asyncio.sleep(0)
            if req.payload == "raise":
                raise RuntimeError("model exploded")
            return {"statusCode": 201, "body": {"kind": "async", "payload": req.payload}}

        class CallableObject:
            async def __call__(self, req: rf.Request) -> None:
                return None

        cases: List[Tuple[str, rf.Handler, Any, Dict[str, Any]]] = [
            ("sync", sync, {"x": 1}, {"statusCode": 200, "body": {"kind": "sync", "payload": {"x": 1}}}),
            ("async", asynchronous, [1], {"statusCode": 201, "body": {"kind": "async", "payload": [1]}}),
            ("async raises", asynchronous, "raise", {"statusCode": 500, "error": "RuntimeError: model exploded"}),
            ("async callable object", CallableObject(), None, {"statusCode": 200}),
        ]
        for srv, sock in self.each_server():
            for name, fn, payload, want in cases:
                with self.subTest(name):
                    path = sock + "." + name.replace(" ", "-")
                    srv.start(self, fn, path)
                    conn = rf.UnixHTTPConnection(path)
                    self.addCleanup(conn.close)
                    with open(os.devnull, "w") as devnull:
                        stderr, sys.stderr = sys.stderr, devnull
                        try:
                            status, got = conn.request("POST", "/invoke", {"invocationID": "i", "payload": payload})
                        finally:
                            sys.stderr = stderr
                    self.assertEqual((status, got), (200, want))

    def test_cancel_reaches_handler(self) -> None:
        """The sidecar cancels by closing the connection: req.cancelled is set and an
        async handler is cancelled; the next invocation on a new connection works."""
        for srv, sock in self.each_server():
            for kind in ("sync", "async"):
                with self.subTest(kind):
                    started, saw_cancel = threading.Event(), threading.Event()

                    def sync(req: rf.Request) -> rf.Response:
                        if req.payload == "quick":
                            return rf.Response(body="quick")
                        started.set()
                        if req.cancelled.wait(10):
                            saw_cancel.set()
                        return rf.Response(body="too late")

                    async def asynchronous(req: rf.Request) -> rf.Response:
                        if req.payload == "quick":
                            return rf.Response(body="quick")
                        started.set()
                        try:
                            await asyncio.sleep(10)
                        except asyncio.CancelledError:
                            if req.cancelled.is_set():
                                saw_cancel.set()
                            raise
                        return rf.Response(body="too late")

                    path = f"{sock}.{kind}"
                    srv.start(self, sync if kind == "sync" else asynchronous, path)
                    s = raw_post(path, b'{"invocationID":"c","payload":"slow"}')
                    self.assertTrue(started.wait(5), "handler did not start")
                    s.close()
                    self.assertTrue(saw_cancel.wait(5), "handler never saw the cancel")
                    conn = rf.UnixHTTPConnection(path)
                    self.addCleanup(conn.close)
                    self.assertEqual(conn.request("POST", "/invoke", {"invocationID": "q", "payload": "quick"}),
                                     (200, {"statusCode": 200, "body": "quick"}))

    def test_chunked_bodies_keep_the_connection(self) -> None:
        def fn(req: rf.Request) -> rf.Response:
            return rf.Response(body=req.payload)

        big = {"blob": "x" * 200_000}
        for srv, sock in self.each_server():
            srv.start(self, fn, sock)
            conn = rf.UnixHTTPConnection(sock)
            self.addCleanup(conn.close)
            for i, payload in enumerate([{"a": 1}, big, "third"]):
                body = json.dumps({"invocationID": f"ch{i}", "payload": payload}).encode()
                # Three requests on one keep-alive connection, each in several chunks.
                chunks = iter([body[:7], body[7:100_000], body[100_000:]])
                self.assertEqual(conn.request("POST", "/invoke", chunks, encode_chunked=True),
                                 (200, {"statusCode": 200, "body": payload}), f"request {i}")

    def test_traceparent_reaches_the_handler(self) -> None:
        """The sidecar's traceparent header is req.traceparent (bounded, well-formed) and a wrapped app's header."""
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

        def handler(req: rf.Request) -> rf.Response:
            return rf.Response(body=req.traceparent)

        cases = [("valid", tp, tp), ("none", None, ""), ("malformed", "00-xyz-01", ""), ("oversized", tp + "-" + "a" * 128, "")]
        for srv, sock in self.each_server():
            srv.start(self, handler, sock)
            conn = rf.UnixHTTPConnection(sock)
            self.addCleanup(conn.close)
            for name, sent, want in cases:
                with self.subTest(name):
                    status, got = conn.request("POST", "/invoke", {"invocationID": name},
                                               headers={"traceparent": sent} if sent else None)
                    self.assertEqual((status, got.get("body")), (200, want))

        if uvicorn is None:
            self.skipTest("uvicorn not installed (python3-uvicorn)")

        async def app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
                return
            seen = [v.decode() for k, v in scope["headers"] if k == b"traceparent"]
            body = json.dumps(seen).encode()
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})

        wsock = os.path.join(tempdir(self), "w.sock")
        serve_uvicorn(self, rf.wrap_asgi(app, config=rf.Config(socket_path=wsock)), wsock)
        conn = rf.UnixHTTPConnection(wsock)
        self.addCleanup(conn.close)
        # The sidecar's trace wins over a caller's header of the same name.
        status, got = conn.request("POST", "/invoke", {"invocationID": "w", "headers": {"traceparent": "caller"}}, headers={"traceparent": tp})
        self.assertEqual((status, got["body"]), (200, [tp]))


class TestChunkedDecoder(unittest.TestCase):
    def test_read_chunked(self) -> None:
        import io
        cases = [
            ("two chunks", b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\nNEXT", b"abcde", b"NEXT"),
            ("trailers", b"1\r\nx\r\n0\r\nX-Trailer: 1\r\n\r\n", b"x", b""),
            ("empty", b"0\r\n\r\n", b"", b""),
        ]
        for name, wire, want, rest in cases:
            with self.subTest(name):
                f = io.BytesIO(wire)
                self.assertEqual(rf.read_chunked(f), want)
                self.assertEqual(f.read(), rest)
        bad = [
            ("bad size", b"zz\r\nabc\r\n0\r\n\r\n", "bad chunk size"),
            ("short chunk", b"5\r\nab", "closed inside a chunk"),
            ("missing CRLF", b"3\r\nabcX\r\n0\r\n\r\n", "not followed by CRLF"),
            ("too large", b"10\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n", "exceeds 8 bytes"),
            ("truncated", b"3\r\nabc\r\n", "truncated"),
        ]
        for name, wire, msg in bad:
            with self.subTest(name):
                with self.assertRaisesRegex(ValueError, msg):
                    rf.read_chunked(io.BytesIO(wire), limit=8)

    def test_bad_chunked_body_is_400(self) -> None:
        sock = os.path.join(tempdir(self), "f.sock")
        serve_builtin(self, lambda req: None, sock)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(s.close)
        s.connect(sock)
        s.sendall(b"POST /invoke HTTP/1.1\r\nHost: f\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        answer = s.makefile("rb").read()  # the server answers and closes: framing is lost
        self.assertTrue(answer.startswith(b"HTTP/1.1 400"), answer)
        self.assertIn(b"bad chunk size", answer)


@unittest.skipIf(uvicorn is None or fastapi is None, "uvicorn/FastAPI not installed (python3-uvicorn, python3-fastapi)")
class TestASGI(unittest.TestCase):
    """Existing ASGI applications and the examples, served by uvicorn."""

    def test_wrap_fastapi(self) -> None:
        sys.path.insert(0, HERE)
        self.addCleanup(sys.path.remove, HERE)
        from examples import fastapi_app

        sock = os.path.join(tempdir(self), "f.sock")
        serve_uvicorn(self, fastapi_app.worker, sock)
        conn = rf.UnixHTTPConnection(sock)
        self.addCleanup(conn.close)
        self.assertEqual(conn.request("GET", "/healthz"), (200, {"status": "ok"}))
        status, got = conn.request("POST", "/invoke", {"invocationID": "f", "payload": {"prompt": "robot"},
                                                       "headers": {"x-request-id": "r1"}})
        self.assertEqual(status, 200)
        self.assertEqual((got["statusCode"], got["contentType"], got["body"]),
                         (200, "application/json", {"model": "demo", "output": "ROBOT"}))
        status, got = conn.request("POST", "/invoke", {"invocationID": "v", "payload": {"no": "prompt"}})
        self.assertEqual((status, got["statusCode"], got["body"]["detail"][0]["loc"]), (200, 422, ["body", "prompt"]))
        self.assertNotIn("error", got)
        status, got = conn.request("POST", "/invoke", {"invocationID": "g", "attributes": {"path": "/health", "method": "GET"}})
        self.assertEqual((status, got["statusCode"], got["body"]), (200, 200, {"model": "demo"}))
        status, got = conn.request("POST", "/invoke", {"invocationID": "n", "attributes": {"path": "/nope"}})
        self.assertEqual((status, got["statusCode"]), (200, 404))

    def test_wrap_cancels_the_app(self) -> None:
        started, cancelled = threading.Event(), threading.Event()

        async def app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
                return
            started.set()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        sock = os.path.join(tempdir(self), "f.sock")
        serve_uvicorn(self, rf.wrap_asgi(app, config=rf.Config(socket_path=sock)), sock)
        s = raw_post(sock, b'{"invocationID":"c"}')
        self.assertTrue(started.wait(5))
        s.close()
        self.assertTrue(cancelled.wait(5), "the wrapped app was not cancelled")

    def test_uvicorn_cli_serves_the_examples(self) -> None:
        """The documented command: uvicorn --uds "$RUNPLANE_FRAMEWORK_SOCKET" module:app."""
        cases = [
            ("predictor", "examples.predictor:app", {"prompt": "abc", "steps": 2},
             {"model": "demo", "output": "cba", "steps": 2}),
            ("fastapi", "examples.fastapi_app:worker", {"prompt": "abc"}, {"model": "demo", "output": "ABC"}),
        ]
        for name, target, payload, want in cases:
            with self.subTest(name):
                sock = os.path.join(tempdir(self), "sub", "framework.sock")
                os.makedirs(os.path.dirname(sock))
                env = dict(os.environ, RUNPLANE_FRAMEWORK_SOCKET=sock, PYTHONPATH=HERE)
                p = subprocess.Popen([sys.executable, "-m", "uvicorn", "--uds", sock, "--log-level", "warning", target],
                                     env=env, cwd=HERE, stdout=subprocess.DEVNULL)
                self.addCleanup(p.wait, 10)
                self.addCleanup(p.terminate)
                deadline = time.monotonic() + 15
                while not os.path.exists(sock):
                    self.assertIsNone(p.poll(), "uvicorn exited")
                    self.assertLess(time.monotonic(), deadline, "uvicorn did not create its socket")
                    time.sleep(0.05)
                self.assertEqual(os.stat(sock).st_mode & 0o777, 0o666, "the sidecar may run as another user")
                conn = rf.UnixHTTPConnection(sock)
                self.addCleanup(conn.close)
                for _ in range(100):  # the socket exists a moment before lifespan startup ends
                    try:
                        status, _ = conn.request("GET", "/healthz")
                        break
                    except ConnectionError:
                        time.sleep(0.05)
                self.assertEqual(status, 200)
                status, got = conn.request("POST", "/invoke", {"invocationID": "x", "payload": payload})
                self.assertEqual((status, got["statusCode"], got["body"]), (200, 200, want))


if __name__ == "__main__":
    unittest.main()
