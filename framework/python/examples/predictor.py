"""A Cog/RunPod-style worker: load the model once, answer each invocation.

Serve it with the standard library server::

    python3 examples/predictor.py

or with uvicorn on the framework socket (same handler, same contract)::

    uvicorn --uds "$RUNPLANE_FRAMEWORK_SOCKET" examples.predictor:app

Invoke the pool as usual; the payload is this handler's input::

    curl -X POST .../v1/namespaces/demo/pools/echo/invocations \\
         -d '{"mode":"sync","payload":{"prompt":"a robot","steps":3}}'
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Dict, Optional

import runplane_framework as rf


class Predictor:
    """setup() once at start (Cog's BasePredictor.setup), predict() per invocation."""

    def __init__(self) -> None:
        self.model: Optional[Dict[str, Any]] = None

    def setup(self) -> None:
        # A real worker loads its weights here (from the image or a prepared volume).
        self.model = {"name": os.environ.get("MODEL_NAME", "demo"), "step_seconds": float(os.environ.get("STEP_SECONDS", "0.01"))}

    def ready(self) -> Optional[str]:
        """The health check: None when ready, else why not (the Pod is not Ready meanwhile)."""
        return None if self.model is not None else "model loading"

    async def predict(self, req: rf.Request) -> rf.Response:
        assert self.model is not None
        payload = req.payload if isinstance(req.payload, dict) else {}
        prompt = str(payload.get("prompt", ""))
        steps = int(payload.get("steps", 1))
        if steps < 1 or steps > 1000:
            # A bad input is the invocation's failure, not a crash.
            return rf.Response(statusCode=400, error=f"steps {steps}: must be between 1 and 1000")
        done = 0
        for _ in range(steps):
            # Each await is where a cancel (caller's cancel, timeoutSeconds)
            # arrives as asyncio.CancelledError; nothing to clean up here.
            await asyncio.sleep(self.model["step_seconds"])
            done += 1
        return rf.Response(contentType="application/json",
                           body={"model": self.model["name"], "output": prompt[::-1], "steps": done})


predictor = Predictor()
predictor.setup()
# The ASGI application uvicorn serves.
app = rf.asgi_app(predictor.predict, health=predictor.ready)

if __name__ == "__main__":
    rf.serve(predictor.predict, health=predictor.ready)
