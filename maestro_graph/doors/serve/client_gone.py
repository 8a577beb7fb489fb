"""Noticing a client that leaves: the ASGI server reports it only to a request that reads its body again, and a
route awaiting a finished episode never does. So the middleware reads on the route's behalf from the moment it
starts and, when the client leaves before the response is whole, cancels the route's task: its `await` raises
CancelledError, and the episode it waits on (or streams) is cancelled at its next step (`EpisodeService.complete`,
`EpisodeService._pump`). The request then ends as `ClientDisconnect`, which the request-id middleware logs as one
line. One mechanism for every route that runs an episode: the OpenAI route, plain or streamed (the path cannot tell
them apart), and LangServe's `/invoke` and `/batch` (its streams notice by themselves: their writes fail)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CHAT_ROUTE", "CancelOnDisconnect", "episode_routes"]

CHAT_ROUTE = "/v1/chat/completions"
_LANGSERVE_PLAIN = ("invoke", "batch")
"""LangServe's routes that answer once their episodes end."""


def episode_routes(langserve_path: str) -> Callable[[str], bool]:
    """The request paths whose episodes a leaving client cancels."""
    prefix = f"{langserve_path}/"
    return lambda route: route == CHAT_ROUTE or (route.startswith(prefix)
                                                 and route.rpartition("/")[2] in _LANGSERVE_PLAIN)


class CancelOnDisconnect:
    """ASGI middleware: POST requests whose path `watched` accepts are cancelled when their client disconnects
    before the last byte of the response was sent."""

    def __init__(self, app: ASGIApp, *, watched: Callable[[str], bool]):
        self.app, self.watched = app, watched

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not self.watched(scope["path"]):
            await self.app(scope, receive, send)
            return
        task = asyncio.current_task()
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        answered = left = False

        async def listen() -> None:
            nonlocal left
            while True:
                message = await receive()
                inbox.put_nowait(message)
                if message["type"] == "http.disconnect":
                    if not answered and task is not None:
                        left = True
                        task.cancel()
                    return

        async def sent(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered = True
            await send(message)

        listener = asyncio.create_task(listen())
        try:
            await self.app(scope, inbox.get, sent)
        except asyncio.CancelledError:
            if not left:  # the server itself is stopping the request
                raise
        finally:
            listener.cancel()
            if left:
                task.uncancel()  # type: ignore[union-attr]  # the cancel was this middleware's, and is handled
        if left:
            raise ClientDisconnect()
