"""Interop resource server for mcp-mirror, built on the official Python MCP SDK (mcp 2.3.0, low-level Server).

Usage: /tmp/pyvenv/bin/python python_resource_server.py [--port N] [--resources N] [--page-size N]
                                                        [--era legacy|modern|both]

Serves Streamable HTTP on http://127.0.0.1:PORT/mcp (--port 0 picks a free port) and prints
`listening on http://127.0.0.1:PORT/mcp` once it accepts connections. The catalog holds
`py://catalog/item/{i}` resources, paged by an opaque cursor. The tool `add_resources {count}`
appends resources, then sends `notifications/resources/list_changed` to every handshake-era
session's GET stream and to every open 2026-07-28 `subscriptions/listen` stream.

The SDK itself always answers both eras (it routes on the MCP-Protocol-Version header alone);
`--era` is a thin ASGI shim of ours in front of it that hides the other era:
  legacy: a 2026 header is dropped, so the request meets the handshake transport (no server/discover);
  modern: without a 2026 header, POST gets HTTP 400 / -32022 naming the supported versions, GET/DELETE 405.
"""

import argparse
import base64
import json
import socket

import anyio
import mcp_types as types
import uvicorn
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourcesListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
args.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = pick one)")
args.add_argument("--resources", type=int, default=25, help="initial catalog size")
args.add_argument("--page-size", type=int, default=10, help="resources per resources/list page")
args.add_argument("--era", choices=("legacy", "modern", "both"), default="both")
opts = args.parse_args()
if opts.page_size < 1 or opts.resources < 0:
    args.error("--page-size must be >= 1 and --resources >= 0")

catalog: list[types.Resource] = []
legacy_sessions: dict[str, ServerSession] = {}  # Mcp-Session-Id -> ServerSession (its standalone channel = GET stream)
bus = InMemorySubscriptionBus()  # fan-out to subscriptions/listen streams
listen = ListenHandler(bus)


def add(count: int) -> None:
    for _ in range(count):
        i = len(catalog)
        catalog.append(types.Resource(uri=f"py://catalog/item/{i}", name=f"item-{i}", mime_type="text/plain"))


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def decode_cursor(cursor: str) -> int:
    try:
        tag, offset = base64.urlsafe_b64decode(cursor.encode()).decode().split(":")
        if tag == "offset" and 0 <= int(offset) <= len(catalog):
            return int(offset)
    except (ValueError, UnicodeError):
        pass
    raise MCPError(types.INVALID_PARAMS, "invalid cursor")


async def list_resources(ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    start = decode_cursor(params.cursor) if params and params.cursor is not None else 0
    end = start + opts.page_size
    return types.ListResourcesResult(
        resources=catalog[start:end], next_cursor=encode_cursor(end) if end < len(catalog) else None
    )


async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    if not any(r.uri == params.uri for r in catalog):
        raise MCPError(types.INVALID_PARAMS, f"resource not found: {params.uri}")
    text = f"contents of {params.uri}"
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=params.uri, mime_type="text/plain", text=text)])


ADD_TOOL = types.Tool(
    name="add_resources",
    description="Append resources to the catalog and notify every client that the list changed.",
    input_schema={"type": "object", "properties": {"count": {"type": "integer", "minimum": 1}}, "required": ["count"]},
)


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[ADD_TOOL])


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name != ADD_TOOL.name:
        raise MCPError(types.INVALID_PARAMS, f"unknown tool: {params.name}")
    count = (params.arguments or {}).get("count")
    if not isinstance(count, int) or count < 1:
        raise MCPError(types.INVALID_PARAMS, "count must be a positive integer")
    add(count)
    await bus.publish(ResourcesListChanged())  # 2026-07-28: every open subscriptions/listen stream
    for session in list(legacy_sessions.values()):  # handshake era: every session's standalone GET stream
        await session.send_resource_list_changed()  # never raises; dropped if the session has no GET stream
    return types.CallToolResult(content=[types.TextContent(text=f"catalog now has {len(catalog)} resources")])


async def on_initialized(ctx, params) -> None:
    # Remember the session so tool calls from any session can reach its GET stream. Sessions
    # that end stay here as harmless no-ops (the SDK offers no public end-of-session hook).
    session_id = ctx.request.headers.get("mcp-session-id") if ctx.request is not None else None
    if session_id:
        legacy_sessions[session_id] = ctx.session


class ResourceServer(Server):
    def create_initialization_options(self, notification_options=None, *rest, **kw):
        # The HTTP session manager builds the `initialize` result with no NotificationOptions, and the
        # handshake era's `listChanged` comes only from them, so default it to resources_changed=True.
        notification_options = notification_options or NotificationOptions(resources_changed=True)
        return super().create_initialization_options(notification_options, *rest, **kw)


server = ResourceServer(
    "python-resource-server",
    version="1.0.0",
    on_list_resources=list_resources,
    on_read_resource=read_resource,
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_subscriptions_listen=listen,  # also makes server/discover report listChanged: true
)
server.add_notification_handler("notifications/initialized", types.NotificationParams, on_initialized)
sdk_app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")


async def app(scope, receive, send):
    """The --era shim; with --era both the SDK app is served untouched."""
    if scope["type"] == "http" and opts.era != "both":
        version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode("latin-1")
        modern = version in MODERN_PROTOCOL_VERSIONS
        if opts.era == "legacy" and modern:
            scope = dict(scope, headers=[(k, v) for k, v in scope["headers"] if k != b"mcp-protocol-version"])
        elif opts.era == "modern" and not modern and scope["path"] == "/mcp":
            # What the SDK's 2026 entry answers: 405 to GET/DELETE, -32022 naming the served versions to POST.
            status, headers, body = 405, [(b"allow", b"POST")], b""
            if scope["method"] == "POST":
                data = {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": version or None}
                error = {"code": types.UNSUPPORTED_PROTOCOL_VERSION, "message": "Unsupported protocol version", "data": data}
                status, headers = 400, [(b"content-type", b"application/json")]
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
    await sdk_app(scope, receive, send)


class Web(uvicorn.Server):
    async def shutdown(self, sockets=None):
        listen.close()  # end listen streams gracefully (final frame: the listen result), then stop
        await super().shutdown(sockets)


async def main() -> None:
    add(opts.resources)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", opts.port))
    config = uvicorn.Config(app, host="127.0.0.1", log_level="warning", timeout_graceful_shutdown=1)
    web = Web(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: web.serve(sockets=[sock]))
        while not web.started:
            await anyio.sleep(0.02)
        print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)


if __name__ == "__main__":
    anyio.run(main)
