"""The SDK's MCP server, answering where it would stay silent or log a traceback, and its tool errors on one line.

``build_server`` (``gpuscope.serve.mcp_server``) builds an ``AnsweringServer``
with ``one_line_errors`` as its middleware; ``tests/serve/test_hostile_mcp.py``
sends the malformed messages these answer.
"""

from __future__ import annotations

from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer

from gpuscope.serve.untrusted import MAX_ERROR_CHARS, clean

StateT = TypeVar("StateT")  # what the server's lifespan hands every request


class AnsweringServer(MCPServer[StateT]):
    """The SDK's server, with JSON-RPC errors where it would stay silent or log a traceback.

    Over stdio it runs on a bounded transport that answers each line that is
    no valid JSON-RPC message (``gpuscope.serve.mcp_stdio``), as its HTTP
    transport does; an unknown prompt, or arguments the prompt cannot take,
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
        from gpuscope.serve.mcp_stdio import serve_stdio

        # The SDK keeps the low-level server private; its own run_stdio_async runs it on its unbounded transport.
        await serve_stdio(self._lowlevel_server)


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
