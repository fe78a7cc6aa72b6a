"""Tests of the Python reference framework: python3 -m unittest discover -s framework/python -v"""

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import runplane_framework as rf
from echo import echo

HERE = os.path.dirname(os.path.abspath(__file__))


class ServedFramework(unittest.TestCase):
    """Serves a handler on a temp socket for each test."""

    def serve(self, fn, **kwargs):
        d = tempfile.mkdtemp(prefix="rppy")
        self.addCleanup(shutil.rmtree, d, True)
        sock = os.path.join(d, "sub", "framework.sock")
        fw = rf.Framework(fn, socket_path=sock, **kwargs)
        t = threading.Thread(target=fw.serve_forever, daemon=True)
        t.start()
        self.assertTrue(fw.wait_ready(), "framework did not start")
        self.addCleanup(t.join, 5)
        self.addCleanup(fw.shutdown)
        conn = rf.UnixHTTPConnection(sock)
        self.addCleanup(conn.close)
        return fw, conn


class TestContract(ServedFramework):
    def test_requests(self):
        def fn(req):
            if req.invocationID == "raise":
                raise RuntimeError("model exploded")
            if req.invocationID == "dict":
                return {"statusCode": 201, "body": {"n": 1}}
            if req.invocationID == "none":
                return None
            if req.invocationID == "bad-type":
                return 42
            return rf.Response(body={"id": req.invocationID, "payload": req.payload})

        fw, conn = self.serve(fn)
        cases = [
            ("health", "GET", "/healthz", None, 200, {"status": "ok"}),
            ("health wrong method", "POST", "/healthz", {}, 405, None),
            ("invoke", "POST", "/invoke", {"invocationID": "a", "payload": {"x": 1}, "newField": True}, 200,
             {"statusCode": 200, "body": {"id": "a", "payload": {"x": 1}}}),
            ("dict answer", "POST", "/invoke", {"invocationID": "dict"}, 200, {"statusCode": 201, "body": {"n": 1}}),
            ("None answer", "POST", "/invoke", {"invocationID": "none"}, 200, {"statusCode": 200}),
            ("handler raises", "POST", "/invoke", {"invocationID": "raise"}, 200,
             {"statusCode": 500, "error": "RuntimeError: model exploded"}),
            ("handler returns a wrong type", "POST", "/invoke", {"invocationID": "bad-type"}, 200,
             {"statusCode": 500, "error": "TypeError: handler returned int; want Response, dict or None"}),
            ("bad json", "POST", "/invoke", b"{", 400, None),
            ("no invocation id", "POST", "/invoke", {}, 400,
             {"error": "decode invocation envelope: invocation envelope: field invocationID must not be empty"}),
            ("invoke wrong method", "GET", "/invoke", None, 405, None),
            ("unknown path", "GET", "/nope", None, 404, None),
        ]
        for name, method, path, body, want_status, want_body in cases:
            with self.subTest(name):
                with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
                    status, got = conn.request(method, path, body)
                self.assertEqual(status, want_status, got)
                if want_body is not None:
                    self.assertEqual(got, want_body)
                else:
                    self.assertIn("error", got)
        self.assertEqual(stat_mode(fw.socket_path), 0o666)

    def test_health_callback(self):
        state = {"reason": "model loading"}
        _, conn = self.serve(echo, health=lambda: state["reason"])
        self.assertEqual(conn.request("GET", "/healthz"), (503, {"error": "model loading"}))
        state["reason"] = None
        self.assertEqual(conn.request("GET", "/healthz"), (200, {"status": "ok"}))

    def test_custom_paths(self):
        _, conn = self.serve(echo, invoke_path="/run", health_path="/ok")
        self.assertEqual(conn.request("GET", "/ok")[0], 200)
        status, body = conn.request("POST", "/run", {"invocationID": "p", "workerName": "w"})
        self.assertEqual(status, 200)
        self.assertEqual(body["body"]["workerName"], "w")
        self.assertEqual(body["headers"], {"x-runplane-echo": "1"})

    def test_relative_path_refused(self):
        with self.assertRaisesRegex(ValueError, "invoke path 'run' must start with /"):
            rf.Framework(echo, socket_path="/tmp/x.sock", invoke_path="run")

    def test_echo_fail_attribute(self):
        _, conn = self.serve(echo)
        status, body = conn.request("POST", "/invoke", {"invocationID": "f", "attributes": {"echo.fail": "nope"}})
        self.assertEqual((status, body), (200, {"statusCode": 500, "error": "nope"}))

    def test_stale_socket_and_non_socket(self):
        d = tempfile.mkdtemp(prefix="rppy")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "file")
        open(path, "w").close()
        with self.assertRaisesRegex(ValueError, "is not a socket"):
            rf.Framework(echo, socket_path=path)._listen()


class TestIdempotentInvoke(ServedFramework):
    """A call named by (invocationID, attempt) runs once: a hang-up detaches from it,
    a repeat or a re-attach waits for its outcome, a re-attach never starts one."""

    def test_run_once_and_reattach(self):
        starts, started, gate = [], threading.Event(), threading.Event()

        def fn(req):
            starts.append(req.invocationID)
            started.set()
            if not gate.wait(10):
                return rf.Response(error="gate never opened")
            return rf.Response(body={"ran": req.invocationID, "cancelled": req.cancelled.is_set()})

        fw, conn = self.serve(fn)
        hc = http.client.HTTPConnection("framework")
        hc.sock = socket_to(fw.socket_path)
        hc.request("GET", "/healthz")
        r = hc.getresponse()
        r.read()
        self.assertEqual(r.getheader("Runplane-Framework-Capabilities"), "idempotent-invoke")
        hc.close()

        call = {"invocationID": "i1", "attempt": 1}
        # The first caller dies mid-call.
        first = rf.UnixHTTPConnection(fw.socket_path, timeout=0.3)
        with self.assertRaises(OSError):
            first.request("POST", "/invoke", call)
        first.close()
        self.assertTrue(started.wait(5), "the handler did not start")
        got = {}

        def reattach():
            c = rf.UnixHTTPConnection(fw.socket_path)
            got["attach"] = c.request("POST", "/invoke", call, headers={"Runplane-Attach": "only"})
            c.close()

        t = threading.Thread(target=reattach)
        t.start()
        gate.set()
        t.join(10)
        want = (200, {"statusCode": 200, "body": {"ran": "i1", "cancelled": False}})
        self.assertEqual(got["attach"], want, "the re-attach gets the call's outcome; the hang-up did not cancel it")
        self.assertEqual(conn.request("POST", "/invoke", call), want, "a repeat after the end: the remembered outcome")
        self.assertEqual(starts, ["i1"], "the handler ran once")
        status, body = conn.request("POST", "/invoke", {"invocationID": "i1", "attempt": 2}, headers={"Runplane-Attach": "only"})
        self.assertEqual(status, 404, body)
        self.assertEqual(starts, ["i1"], "a re-attach never starts a call")

    def test_cancel(self):
        started = threading.Event()

        def fn(req):
            started.set()
            return rf.Response(body={"cancelled": req.cancelled.wait(10)})

        fw, conn = self.serve(fn)
        got = {}

        def call():
            c = rf.UnixHTTPConnection(fw.socket_path)
            got["call"] = c.request("POST", "/invoke", {"invocationID": "c", "attempt": 1})
            c.close()

        t = threading.Thread(target=call)
        t.start()
        self.assertTrue(started.wait(5))
        self.assertEqual(conn.request("POST", "/invoke", {"invocationID": "c", "attempt": 1}, headers={"Runplane-Cancel": "true"}),
                         (200, {"status": "cancelled"}))
        t.join(10)
        self.assertEqual(got["call"], (200, {"statusCode": 200, "body": {"cancelled": True}}))


def socket_to(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


class TestEnv(unittest.TestCase):
    def test_config_from_env(self):
        cases = [
            ("defaults", {}, (rf.DEFAULT_SOCKET, "/invoke", "/healthz")),
            ("runplane names", {"RUNPLANE_FRAMEWORK_SOCKET": "/a.sock", "RUNPLANE_FRAMEWORK_INVOKE_PATH": "/run",
                                "RUNPLANE_FRAMEWORK_HEALTH_PATH": "/ok"}, ("/a.sock", "/run", "/ok")),
            ("seed names", {"SERVERLESS_FRAMEWORK_SOCKET_PATH": "/s.sock"}, ("/s.sock", "/invoke", "/healthz")),
            ("runplane wins", {"SERVERLESS_FRAMEWORK_SOCKET_PATH": "/s.sock", "RUNPLANE_FRAMEWORK_SOCKET": "/r.sock"},
             ("/r.sock", "/invoke", "/healthz")),
        ]
        for name, env, want in cases:
            with self.subTest(name):
                c = rf.config_from_env(env)
                self.assertEqual((c.socket_path, c.invoke_path, c.health_path), want)


class TestEchoProcess(unittest.TestCase):
    def test_sigterm_stops_and_removes_socket(self):
        d = tempfile.mkdtemp(prefix="rppy")
        self.addCleanup(shutil.rmtree, d, True)
        sock = os.path.join(d, "framework.sock")
        env = dict(os.environ, RUNPLANE_FRAMEWORK_SOCKET=sock)
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "echo.py")], env=env,
                             stdout=subprocess.DEVNULL, cwd=HERE)
        self.addCleanup(p.kill)
        # The socket file exists from bind(), before listen(): a connection
        # refused then is the server not serving yet (seen at load).
        deadline = time.time() + 10
        while True:
            conn = rf.UnixHTTPConnection(sock)
            try:
                status, body = conn.request("POST", "/invoke", {"invocationID": "e", "payload": [1, 2]})
                break
            except (FileNotFoundError, ConnectionRefusedError):
                self.assertIsNone(p.poll(), "echo.py exited")
                self.assertLess(time.time(), deadline, "echo.py did not serve on its socket")
                time.sleep(0.05)
            finally:
                conn.close()
        self.assertEqual(status, 200)
        self.assertEqual(body["body"]["payload"], [1, 2])
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(10), 0)
        self.assertFalse(os.path.exists(sock), "socket left behind after SIGTERM")


def stat_mode(path):
    return os.stat(path).st_mode & 0o777


if __name__ == "__main__":
    unittest.main()
