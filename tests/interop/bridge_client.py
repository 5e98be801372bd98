"""Lists and reads the mirror's catalog with the official MCP Python SDK client.

The SDK launches `mcp-mirror mcp --socket SOCKET` as a stdio server, exactly as a desktop
app or IDE would, then pages through `resources/list`, lists templates and reads each URI
named on the command line. It prints one JSON object with what it saw, for the Rust test
to check.

Usage: bridge_client.py MIRROR_BINARY SOCKET [URI ...]
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(mirror, socket, uris):
    server = StdioServerParameters(command=mirror, args=["mcp", "--socket", socket])
    async with stdio_client(server) as (read_stream, write_stream):
        async with ClientSession(read_stream, write_stream) as session:
            hello = await session.initialize()
            resources = []
            cursor = None
            pages = 0
            while True:
                params = {"cursor": cursor} if cursor is not None else None
                page = await session.list_resources(params=params)
                pages += 1
                resources.extend(dump(resource) for resource in page.resources)
                cursor = page.next_cursor
                if cursor is None:
                    break
            templates = await session.list_resource_templates()
            reads = {}
            for uri in uris:
                result = await session.read_resource(uri)
                reads[uri] = [dump(content) for content in result.contents]
            print(
                json.dumps(
                    {
                        "protocolVersion": hello.protocol_version,
                        "serverName": hello.server_info.name,
                        "pages": pages,
                        "resources": resources,
                        "templates": [dump(template) for template in templates.resource_templates],
                        "reads": reads,
                    }
                )
            )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
