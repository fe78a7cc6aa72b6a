"""An existing FastAPI application served as a runplane worker, unchanged.

    uvicorn --uds "$RUNPLANE_FRAMEWORK_SOCKET" examples.fastapi_app:worker

Each invocation becomes one request to the app: attributes ``path`` (default
``/predict``) and ``method`` (default POST) pick the route, the payload is the
JSON body, and the app's answer is the invocation's response. FastAPI's own
validation errors come back as statusCode 422 with FastAPI's detail body.
"""

from __future__ import annotations

import asyncio
from typing import Dict

from fastapi import FastAPI
from pydantic import BaseModel

import runplane_framework as rf

api = FastAPI()
state: Dict[str, str] = {}


@api.on_event("startup")
async def load_model() -> None:
    state["model"] = "demo"  # a real app loads its weights here


class Prompt(BaseModel):
    prompt: str
    delay_seconds: float = 0.0


@api.get("/health")
async def health() -> Dict[str, str]:
    return {"model": state["model"]}


@api.post("/predict")
async def predict(p: Prompt) -> Dict[str, str]:
    if p.delay_seconds:
        await asyncio.sleep(p.delay_seconds)  # cancelled here when the sidecar gives up
    return {"model": state["model"], "output": p.prompt.upper()}


# The ASGI application uvicorn serves on the framework socket.
worker = rf.wrap_asgi(api, default_path="/predict", app_health_path="/health")
