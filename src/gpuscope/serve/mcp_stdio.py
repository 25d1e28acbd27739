"""MCP over stdio with backpressure: the SDK's server on our own bounded reader and writer.

The SDK's stdio transport reads every line as it arrives and hands each
request to a task of its own; a client that sends requests and never reads
the answers makes the server hold every answer in memory (1,500 large
``query`` calls grew it to 909 MB in 13 s). Here stdin is read only while
fewer than ``MAX_REQUESTS_IN_FLIGHT`` requests are unanswered and fewer
than ``MAX_QUEUED_BYTES`` of answers wait for stdout: a client that does
not read makes the server stop reading, and its own writes block.

Each line is checked before the SDK sees it, and what is no valid message is
answered here with JSON-RPC's error and ``"id": null`` (the SDK drops such a
line, or takes a request whose id is an object, a float or a boolean for a
notification, and the client waits forever): ``-32700`` for text that is not
JSON, ``-32600`` for JSON that is no JSON-RPC 2.0 message, a request whose id
is not a string or an integer, or a line over ``MAX_LINE_BYTES``.

At end of input the requests already read are answered before the SDK is
told (it would cancel them), so ``gpuscope mcp < calls.jsonl`` answers every
call. The tools never ask the client anything (sampling, elicitation), so an
unanswered request never waits on a line the server has stopped reading.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import anyio
import mcp_types
from anyio.abc import ObjectSendStream
from mcp.server.lowlevel import Server
from mcp.shared.message import ServerMessageMetadata, SessionMessage

MAX_REQUESTS_IN_FLIGHT = 16
MAX_QUEUED_BYTES = 16 * 1024 * 1024  # answers serialized and waiting for stdout
MAX_LINE_BYTES = 16 * 1024 * 1024  # one incoming message
READ_CHUNK_BYTES = 64 * 1024
WRITE_BATCH_BYTES = 1024 * 1024

log = logging.getLogger(__name__)


class LineTooLong:
    """What the line reader yields for a line past ``MAX_LINE_BYTES`` (the rest of it is skipped)."""


TOO_LONG = LineTooLong()


class Flow:
    """The requests in flight and the answers queued for stdout, and the waits on both.

    Everything runs on the event loop's thread; ``changed`` wakes every waiter whenever a count moves.
    """

    def __init__(self) -> None:
        self.in_flight: Counter[str | int] = Counter()  # by request id: a client may reuse one
        self.queue: deque[bytes] = deque()
        self.queued_bytes = 0
        self.output_closed = False
        self.output_broken = False
        self._changed = anyio.Event()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def requests_in_flight(self) -> int:
        return self.in_flight.total()

    def has_room(self) -> bool:
        """Whether another line may be read: few enough requests unanswered and bytes unwritten."""
        return self.requests_in_flight < MAX_REQUESTS_IN_FLIGHT and self.queued_bytes < MAX_QUEUED_BYTES

    async def wait_for_room(self) -> None:
        while not self.has_room():
            await self._changed.wait()

    async def wait_until_answered(self) -> None:
        while self.requests_in_flight:
            await self._changed.wait()

    def request_read(self, request_id: str | int) -> None:
        self.in_flight[request_id] += 1

    def request_settled(self, request_id: str | int) -> None:
        """The request with this id was answered (or cancelled by the client, and so never will be)."""
        if self.in_flight[request_id] > 0:
            self.in_flight[request_id] -= 1
            if not self.in_flight[request_id]:
                del self.in_flight[request_id]
            self._wake()

    async def put(self, line: bytes) -> None:
        """Queue ``line`` for stdout, once the queue is under its cap (any one line may pass it)."""
        while self.queued_bytes >= MAX_QUEUED_BYTES and not self.output_broken:
            await self._changed.wait()
        if self.output_broken:
            return  # the client closed its end: nobody reads what would be written
        self.queue.append(line)
        self.queued_bytes += len(line)
        self._wake()

    async def take(self) -> bytes | None:
        """The next bytes for stdout (lines joined up to ``WRITE_BATCH_BYTES``); None once closed and written."""
        while not self.queue:
            if self.output_closed:
                return None
            await self._changed.wait()
        batch = [self.queue.popleft()]
        size = len(batch[0])
        while self.queue and size + len(self.queue[0]) <= WRITE_BATCH_BYTES:
            batch.append(self.queue.popleft())
            size += len(batch[-1])
        return b"".join(batch)

    def written(self, size: int) -> None:
        self.queued_bytes -= size
        self._wake()

    def broken(self) -> None:
        self.output_broken = True
        self.queue.clear()
        self.queued_bytes = 0
        self._wake()

    def close_output(self) -> None:
        self.output_closed = True
        self._wake()


class OutboundLines:
    """The SDK's write stream: each message serialized at once and queued on the ``Flow`` for the writer."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        text = message.model_dump_json(by_alias=True, exclude_unset=True)
        await self.flow.put(text.encode("utf-8", "replace") + b"\n")
        if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError) and message.id is not None:
            self.flow.request_settled(message.id)

    async def aclose(self) -> None:
        self.flow.close_output()

    async def __aenter__(self) -> OutboundLines:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def error_line(code: int, message: str) -> bytes:
    """A JSON-RPC error with ``"id": null``: the answer to a line whose id cannot be read."""
    error = mcp_types.JSONRPCError(jsonrpc="2.0", id=None, error=mcp_types.ErrorData(code=code, message=message))
    return error.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


PARSE_ERROR_LINE = error_line(mcp_types.PARSE_ERROR, "Parse error: the line is not JSON")
NOT_JSON_RPC_LINE = error_line(mcp_types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")
BAD_ID_LINE = error_line(mcp_types.INVALID_REQUEST, "Invalid Request: an id must be a string or an integer")
TOO_LONG_LINE = error_line(
    mcp_types.INVALID_REQUEST, f"Invalid Request: a message over {MAX_LINE_BYTES // (1024 * 1024)} MiB"
)


def has_id_member(text: str) -> bool:
    """Whether the JSON object in ``text`` has an ``id`` member (of any value: a notification has none)."""
    try:
        doc = json.loads(text)
    except ValueError:  # what the SDK read, Python's parser may not (an integer past 4,300 digits)
        return False
    return isinstance(doc, dict) and "id" in doc


def read_message(line: bytes) -> mcp_types.JSONRPCMessage | bytes:
    """The message on ``line`` as the SDK reads it, or the error line that answers it."""
    text = line.decode("utf-8", "replace")  # as the SDK's transport reads: invalid UTF-8 is then invalid JSON
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError as exc:  # pydantic's ValidationError
        return PARSE_ERROR_LINE if "json_invalid" in str(exc) else NOT_JSON_RPC_LINE
    # The SDK takes a request whose id is no string or integer ({"a":1}, [1], 1.5, 1e999, true, null) for a
    # notification, and a notification is never answered.
    if isinstance(message, mcp_types.JSONRPCNotification) and has_id_member(text):
        return BAD_ID_LINE
    return message


async def stdin_lines(fd: int, flow: Flow) -> AsyncIterator[bytes | LineTooLong]:
    """The lines read from ``fd`` (without their newline), each only once the flow has room for it."""
    buffer = bytearray()
    searched = 0  # how far the buffer holds no newline: a long line is scanned once, not once a chunk
    skipping = False  # inside a line past the cap, until its newline
    end_of_input = False
    while True:
        await flow.wait_for_room()
        newline = buffer.find(b"\n", searched)
        if newline >= 0:
            line = bytes(buffer[:newline]) if newline <= MAX_LINE_BYTES else None
            del buffer[: newline + 1]
            searched = 0
            if skipping:
                skipping = False
            else:
                yield TOO_LONG if line is None else line
            continue
        if end_of_input:
            if buffer and not skipping:
                yield bytes(buffer)
            return
        if len(buffer) > MAX_LINE_BYTES or skipping:
            buffer.clear()
            if not skipping:
                skipping = True
                yield TOO_LONG
        searched = len(buffer)
        chunk = await anyio.to_thread.run_sync(os.read, fd, READ_CHUNK_BYTES, abandon_on_cancel=True)
        if chunk:
            buffer += chunk
        else:
            end_of_input = True


async def read_stdin(fd: int, flow: Flow, to_server: ObjectSendStream[SessionMessage]) -> None:
    """Pass each message on stdin to the SDK, answer each invalid one, and close at end of input."""
    async with to_server:
        async for line in stdin_lines(fd, flow):
            message = TOO_LONG_LINE if isinstance(line, LineTooLong) else read_message(line)
            if isinstance(message, bytes):
                await flow.put(message)
                continue
            metadata: ServerMessageMetadata | None = None
            if isinstance(message, mcp_types.JSONRPCRequest):
                request_id = message.id
                flow.request_read(request_id)

                # The SDK calls this for a request it settles without answering (the client cancelled it).
                async def settled_unanswered(request_id: str | int = request_id) -> None:
                    flow.request_settled(request_id)

                metadata = ServerMessageMetadata(on_request_unanswered=settled_unanswered)
            await to_server.send(SessionMessage(message, metadata=metadata))
        # The SDK cancels what is in flight at end of input: answer it first.
        await flow.wait_until_answered()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def write_stdout(fd: int, flow: Flow) -> None:
    """Write what the flow queues to ``fd`` until the SDK closes its write stream and all is written."""
    while (data := await flow.take()) is not None:
        try:
            await anyio.to_thread.run_sync(write_all, fd, data, abandon_on_cancel=True)
        except OSError as exc:
            log.warning("stdout is closed (%s): answers are dropped until stdin ends", exc)
            flow.broken()
            continue
        flow.written(len(data))


@contextmanager
def claimed_stdio() -> Iterator[tuple[int, int]]:
    """Private descriptors for the protocol's stdin and stdout, with fd 0 on /dev/null and fd 1 on stderr.

    A tool, a library or a child process that prints then cannot corrupt the protocol's stream, and one that
    reads stdin reads nothing. Both are restored on exit. The private descriptors stay open: a worker thread
    may still be blocked on one, and a closed number could be reused under it.
    """
    wire_in = os.dup(0)
    wire_out = os.dup(1)
    null_in = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_in, 0)
    os.close(null_in)
    os.dup2(2, 1)
    try:
        yield wire_in, wire_out
    finally:
        with suppress(OSError, ValueError):
            sys.stdout.flush()  # what was printed meanwhile goes to stderr, not onto the restored wire
        os.dup2(wire_out, 1)
        os.dup2(wire_in, 0)


async def serve_stdio(server: Server[Any]) -> None:
    """Serve the low-level SDK ``server`` over this process's stdin and stdout, with the bounds above."""
    with claimed_stdio() as (wire_in, wire_out):
        flow = Flow()
        to_server, from_stdin = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as writing:
            writing.start_soon(write_stdout, wire_out, flow)
            async with anyio.create_task_group() as reading:
                reading.start_soon(read_stdin, wire_in, flow, to_server)
                await server.run(from_stdin, OutboundLines(flow), server.create_initialization_options())
                reading.cancel_scope.cancel()  # run() ends at end of input, or the reader has none to feed
            flow.close_output()  # run() has closed it already; the writer ends once all is written
