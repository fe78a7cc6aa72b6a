"""The idempotent invoke: a call runs once per (invocation ID, attempt).

The sidecar sends each call's ``attempt`` in the envelope. A POST of a call
the framework runs or ran recently waits for that call and answers its
outcome instead of running it again, so a sidecar restarted mid-call
re-attaches to it (header ``Runplane-Attach: only``: never start an unknown
call, answer 404 with ``Runplane-Attach: unknown``). A hang-up no longer
cancels such a call (it may be the sidecar dying): the sidecar cancels with
``Runplane-Cancel: true``, and a call nobody re-attaches to within the
detach grace is cancelled. The health answer advertises it with
``Runplane-Framework-Capabilities: idempotent-invoke``.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

CAPABILITIES_HEADER = "Runplane-Framework-Capabilities"
CAPABILITY_IDEMPOTENT_INVOKE = "idempotent-invoke"
ATTACH_HEADER = "Runplane-Attach"
CANCEL_HEADER = "Runplane-Cancel"
ATTACH_ONLY = "only"
ATTACH_UNKNOWN = "unknown"

DEFAULT_DETACH_GRACE = 300.0
DEFAULT_RECENT_OUTCOMES = 1024
DEFAULT_RECENT_FOR = 600.0

Key = Tuple[str, int]


class Call:
    """One call: running until ``done`` is set, then ``outcome`` is its envelope."""

    def __init__(self, cancel: Callable[[], None]) -> None:
        self.done = threading.Event()
        self.outcome: Dict[str, Any] = {}
        self.cancel = cancel
        self.watchers = 0
        self.detach: Optional[threading.Timer] = None
        self.finished_at = 0.0
        self._wakes: List[Callable[[], None]] = []

    def on_done(self, wake: Callable[[], None]) -> None:
        """Call wake once the call is done (at once if it is)."""
        self._wakes.append(wake)
        if self.done.is_set():
            wake()


class Calls:
    """The calls in flight and the outcomes of recent ones."""

    def __init__(self, detach_grace: float = DEFAULT_DETACH_GRACE, keep: int = DEFAULT_RECENT_OUTCOMES,
                 keep_for: float = DEFAULT_RECENT_FOR) -> None:
        self.detach_grace = detach_grace
        self.keep_for = keep_for
        self._lock = threading.Lock()
        self._calls: Dict[Key, Call] = {}
        self._finished: Deque[Tuple[Key, Call]] = collections.deque(maxlen=keep)

    def start(self, key: Key, begin: bool, run: Callable[[Callable[[Dict[str, Any]], None]], Callable[[], None]]) -> Optional[Call]:
        """The call of key with one more watcher (release it), started when new and begin.

        run(finish) starts the handler, which calls finish(outcome) when it
        ends, and returns the function that cancels it. None: unknown and
        not begun.
        """
        with self._lock:
            self._expire()
            c = self._calls.get(key)
            if c is not None:
                c.watchers += 1
                if c.detach is not None:
                    c.detach.cancel()
                    c.detach = None
                return c
            if not begin:
                return None
            new = Call(cancel=lambda: None)
            new.watchers = 1
            self._calls[key] = new
        new.cancel = run(lambda outcome: self._finish(key, new, outcome))
        return new

    def _finish(self, key: Key, c: Call, outcome: Dict[str, Any]) -> None:
        with self._lock:
            c.outcome = outcome
            c.finished_at = time.monotonic()
            if c.detach is not None:
                c.detach.cancel()
                c.detach = None
            c.done.set()
            if len(self._finished) == self._finished.maxlen:
                old_key, old = self._finished[0]
                if self._calls.get(old_key) is old:
                    del self._calls[old_key]
            self._finished.append((key, c))
            wakes = list(c._wakes)
        for wake in wakes:
            wake()

    def _expire(self) -> None:
        """Forget outcomes older than keep_for (locked)."""
        now = time.monotonic()
        while self._finished and now - self._finished[0][1].finished_at > self.keep_for:
            key, c = self._finished.popleft()
            if self._calls.get(key) is c:
                del self._calls[key]

    def release(self, c: Call) -> None:
        """Drop a watcher; the last leaving a running call starts its detach grace."""
        with self._lock:
            c.watchers -= 1
            if c.done.is_set() or c.watchers > 0 or c.detach is not None:
                return
            c.detach = threading.Timer(self.detach_grace, c.cancel)
            c.detach.daemon = True
            c.detach.start()

    def cancel(self, key: Key) -> bool:
        """Cancel the call of key; False when it is not known."""
        with self._lock:
            c = self._calls.get(key)
        if c is None:
            return False
        c.cancel()
        return True
