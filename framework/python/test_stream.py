"""Tests of streaming (generator) handlers: python3 -m unittest discover -s framework/python -v"""

import asyncio
import json
import os
import shutil
import tempfile
import threading
import unittest

import runplane_framework as rf
from runplane_framework._client import _UnixConnection


def events(raw):
    """The (event, data) pairs of a server-sent event stream."""
    out = []
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        name, data = "", []
        for line in block.split("\n"):
            k, _, v = line.partition(":")
            v = v[1:] if v.startswith(" ") else v
            if k == "event":
                name = v
            elif k == "data":
                data.append(v)
        out.append((name, "\n".join(data)))
    return out


class TestStreamHandlers(unittest.TestCase):
    def serve(self, fn):
        d = tempfile.mkdtemp(prefix="rpps")
        self.addCleanup(shutil.rmtree, d, True)
        sock = os.path.join(d, "framework.sock")
        fw = rf.Framework(fn, socket_path=sock)
        t = threading.Thread(target=fw.serve_forever, daemon=True)
        t.start()
        self.assertTrue(fw.wait_ready())
        self.addCleanup(t.join, 5)
        self.addCleanup(fw.shutdown)
        return sock

    def invoke(self, sock):
        conn = _UnixConnection(sock, 10)
        self.addCleanup(conn.close)
        conn.request("POST", "/invoke", body=json.dumps({"invocationID": "i1", "payload": {"prompt": "hi"}}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type"), r.read().decode()

    def test_sync_generator(self):
        def fn(req):
            yield "Hello"
            yield b", "
            yield {"token": "world"}
            yield "two\nlines"

        status, ctype, raw = self.invoke(self.serve(fn))
        self.assertEqual(200, status)
        self.assertEqual("text/event-stream", ctype)
        self.assertEqual([("", "Hello"), ("", ", "), ("", '{"token": "world"}'), ("", "two\nlines")], events(raw))

    def test_async_generator(self):
        async def fn(req):
            for tok in ["a", "b", "c"]:
                await asyncio.sleep(0)
                yield tok

        self.assertTrue(rf.is_stream_handler(fn))
        _, _, raw = self.invoke(self.serve(fn))
        self.assertEqual([("", "a"), ("", "b"), ("", "c")], events(raw))

    def test_error_after_chunks(self):
        def fn(req):
            yield "partial"
            raise RuntimeError("model crashed")

        _, _, raw = self.invoke(self.serve(fn))
        self.assertEqual([("", "partial"), ("error", "RuntimeError: model crashed")], events(raw))

    def test_plain_handlers_are_not_streams(self):
        self.assertFalse(rf.is_stream_handler(lambda req: None))

        async def a(req):
            return None

        self.assertFalse(rf.is_stream_handler(a))


if __name__ == "__main__":
    unittest.main()
