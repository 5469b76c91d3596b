"""The model routes: ``GET /v1/models`` and ``GET /v1/models/{model}`` (the OpenAI SDKs'
``models.list``/``models.retrieve``), answered from :func:`router.models.model_cards` and
:func:`router.models.model_card` (SGLang 0.5.23's ``ModelCard`` shape; an unknown id is 404
``model_not_found``, ``param: "model"``). Behind client keys when ``auth`` is configured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from router.models import model_card, model_cards

if TYPE_CHECKING:
    from router.pools import Runtime

__all__ = ["install_model_routes"]


def install_model_routes(app: FastAPI) -> None:
    """Register ``GET /v1/models`` and ``GET /v1/models/{model}`` (client keys as on every
    ``/v1`` route when ``auth`` is configured)."""

    def runtime_of(request: Request) -> Runtime:
        runtime: Runtime = request.app.state.specgate.runtime
        if runtime.auth is not None:
            runtime.auth.check_client(request.headers.get("authorization"))
        return runtime

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": model_cards(runtime_of(request))})

    @app.get("/v1/models/{model:path}")
    async def retrieve(request: Request, model: str) -> Response:
        return JSONResponse(model_card(runtime_of(request), model))

    del models, retrieve  # registered
