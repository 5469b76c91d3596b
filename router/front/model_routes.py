"""The model routes: ``GET /v1/models`` and ``GET /v1/models/{model}`` (the OpenAI SDKs'
``models.list``/``models.retrieve``), answered over every model of the fleet from
:func:`router.state.models.fleet_cards` and :func:`router.state.models.fleet_card` (SGLang
0.5.23's ``ModelCard`` shape; an unknown id is 404 ``model_not_found``, ``param: "model"``).
Behind client keys when ``auth`` is configured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from router.state.models import fleet_card, fleet_cards

if TYPE_CHECKING:
    from router.state.fleet import Fleet

__all__ = ["install_model_routes"]


def install_model_routes(app: FastAPI) -> None:
    """Register ``GET /v1/models`` and ``GET /v1/models/{model}`` (client keys as on every
    ``/v1`` route when ``auth`` is configured)."""

    def fleet_of(request: Request) -> Fleet:
        fleet: Fleet = request.app.state.specgate.fleet
        auth = fleet.default.auth
        if auth is not None:
            auth.check_client(request.headers.get("authorization"))
        return fleet

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": fleet_cards(fleet_of(request))})

    @app.get("/v1/models/{model:path}")
    async def retrieve(request: Request, model: str) -> Response:
        return JSONResponse(fleet_card(fleet_of(request), model))

    del models, retrieve  # registered
