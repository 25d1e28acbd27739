"""The SDK's MCP server, answering where it would stay silent or log a traceback, and its tool errors on one line.

``build_server`` (``gpuscope.serve.mcp_server``) builds an ``AnsweringServer``
with ``one_line_errors`` as its middleware; ``tests/serve/test_hostile_mcp.py``
sends the malformed messages these answer.
"""

from __future__ import annotations

from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer

from gpuscope.serve.untrusted import MAX_ERROR_CHARS, clean

StateT = TypeVar("StateT")  # what the server's lifespan hands every request


class AnsweringServer(MCPServer[StateT]):
    """The SDK's server, with JSON-RPC errors where it would stay silent or log a traceback.

    A stdio line that is no JSON-RPC message is answered (as its HTTP
    transport does); an unknown prompt, or arguments the prompt cannot take,
    are invalid parameters (the SDK answered code 0 and logged a traceback).
    """

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        import mcp_types
        from mcp.shared.exceptions import MCPError

        try:
            return await super().get_prompt(name, arguments, context)
        except ValueError as exc:  # the SDK's wrapping of every prompt failure
            raise MCPError(mcp_types.INVALID_PARAMS, " ".join(str(exc).split())[:300]) from None

    async def run_stdio_async(self) -> None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read_stream, write_stream):
            # The SDK keeps the low-level server private; its own run_stdio_async does exactly this.
            low = self._lowlevel_server
            await low.run(AnswerBadLines(read_stream, write_stream), write_stream, low.create_initialization_options())


class AnswerBadLines:
    """The stdio read stream, with each line that is not a JSON-RPC message answered by a JSON-RPC error.

    The SDK's stdio transport passes such a line on as an exception, and its
    server drops it silently: a client that sent a request waits for an answer
    forever. JSON-RPC 2.0 says: -32700 for text that is not JSON, -32600 for
    JSON that is no request, with ``"id": null``.
    """

    def __init__(self, inner: Any, write: Any) -> None:
        self.inner, self.write = inner, write

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)  # the sender's context, for the SDK's dispatcher

    async def receive(self) -> Any:
        import mcp_types
        from mcp.shared.message import SessionMessage

        while True:
            item = await self.inner.receive()
            if not isinstance(item, Exception):
                return item
            if "json_invalid" in str(item):
                code, message = mcp_types.PARSE_ERROR, "Parse error: the line is not JSON"
            else:
                code, message = mcp_types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message"
            error = mcp_types.JSONRPCError(
                jsonrpc="2.0", id=None, error=mcp_types.ErrorData(code=code, message=message)
            )
            await self.write.send(SessionMessage(error))

    def __aiter__(self) -> AnswerBadLines:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> AnswerBadLines:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def one_line_errors(ctx: Any, call_next: Any) -> Any:
    """A tool error's text on one line, cleaned and cut like data.

    The SDK's argument validation reports over several lines, with a link;
    and an error that quotes an argument (``since=…: not a duration``) would
    carry whatever the client sent: escape sequences, 50,000 characters.
    """
    result = await call_next(ctx)
    if getattr(ctx, "method", None) == "tools/call" and isinstance(result, dict) and result.get("isError"):
        for item in result.get("content", []):
            if isinstance(item, dict) and item.get("type") == "text":
                lines = [line.strip() for line in str(item.get("text", "")).splitlines() if line.strip()]
                text = " ".join(line for line in lines if not line.startswith("For further information"))
                item["text"] = clean(text, MAX_ERROR_CHARS)
    return result
