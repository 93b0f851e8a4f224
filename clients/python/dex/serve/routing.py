"""The route class of every router of the server (``APIRouter(route_class=Route)``): its
requests read their body with a size limit and parse JSON with ``jsonio.parse_body``, so a
body that is too large (413), not UTF-8, not JSON, too deeply nested or holding NaN or an
infinity (400) is refused before the handler runs, as a problem.  FastAPI lets a
:class:`Problem` raised while it reads the body through unchanged (it is an
``HTTPException``); any other error there would become its generic 400."""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Coroutine

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from . import jsonio
from .db import Problem, title


def _too_large() -> Problem:
    return Problem(413, title(413), f"the body is larger than {jsonio.MAX_BODY} bytes")


class LimitedRequest(Request):
    """A request whose body is at most ``jsonio.MAX_BODY`` bytes and whose JSON is parsed
    strictly."""

    async def stream(self) -> AsyncIterator[bytes]:
        declared = self.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > jsonio.MAX_BODY:
            raise _too_large()
        size = 0
        async for chunk in super().stream():
            size += len(chunk)
            if size > jsonio.MAX_BODY:
                raise _too_large()
            yield chunk

    async def json(self) -> Any:
        if not hasattr(self, "_parsed"):
            try:
                self._parsed = jsonio.parse_body(await self.body())
            except jsonio.BadJSON as e:
                raise Problem(400, title(400), str(e)) from None
        return self._parsed


class Route(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def limited(request: Request) -> Response:
            return await handler(LimitedRequest(request.scope, request.receive))

        return limited
