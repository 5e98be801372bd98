"""Calls the mirror's own tools with the official MCP Python SDK client, through the bridge.

The SDK launches `mcp-mirror mcp --socket SOCKET` as a stdio server, lists its tools, calls
`search_catalog` with QUERY (the SDK checks `structuredContent` against the tool's
`outputSchema`) and `describe_entry` for the first hit, and prints one JSON object with what it
saw, for the Rust test to check.

Usage: catalog_tools_client.py MIRROR_BINARY SOCKET QUERY
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(mirror, socket, query):
    server = StdioServerParameters(command=mirror, args=["mcp", "--socket", socket])
    async with stdio_client(server) as (read_stream, write_stream):
        async with ClientSession(read_stream, write_stream) as session:
            hello = await session.initialize()
            tools = await session.list_tools()
            found = await session.call_tool("search_catalog", {"query": query})
            described = None
            hits = (found.structured_content or {}).get("hits", [])
            if hits:
                first = hits[0]
                described = await session.call_tool(
                    "describe_entry",
                    {"kind": first["kind"], "server": first["server"], "name": first["name"]},
                )
            print(
                json.dumps(
                    {
                        "toolsCapability": hello.capabilities.tools is not None,
                        "tools": [tool.name for tool in tools.tools],
                        "search": dump(found),
                        "describe": dump(described) if described else None,
                    }
                )
            )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
