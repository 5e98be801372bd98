"""Lists and reads the mirror's catalog over its HTTP face with the official MCP Python SDK client.

The SDK connects to `URL` (Streamable HTTP) with `Authorization: Bearer TOKEN`, negotiating the
era as MODE says (`auto` probes `server/discover`, `legacy` sends `initialize`), pages through
`resources/list` and reads each URI named on the command line. It prints one JSON object with
what it saw, for the Rust test to check.

Usage: http_client.py URL TOKEN MODE [URI ...]
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(url, token, mode, uris):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(url, http_client=http)
    async with http:
        async with Client(transport, mode=mode) as client:
            resources = []
            cursor = None
            pages = 0
            while True:
                page = await client.list_resources(cursor=cursor, cache_mode="refresh")
                pages += 1
                resources.extend(dump(resource) for resource in page.resources)
                cursor = page.next_cursor
                if cursor is None:
                    break
            reads = {}
            for uri in uris:
                result = await client.read_resource(uri, cache_mode="refresh")
                reads[uri] = [dump(content) for content in result.contents]
            print(
                json.dumps(
                    {
                        "protocolVersion": client.session.protocol_version,
                        "pages": pages,
                        "resources": resources,
                        "reads": reads,
                    }
                )
            )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
