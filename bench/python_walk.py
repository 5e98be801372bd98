"""The official Python MCP SDK walking a catalog: a `ClientSession.list_resources` cursor loop
that stores nothing. Used by `bench/run` as the comparison for the mirror's walk.

Usage: python_walk.py http URL ROUNDS | python_walk.py stdio ROUNDS COMMAND [ARGS...]
Prints one JSON line per round: {"seconds": s, "cpu_seconds": c, "resources": n, "pages": p}
(cpu_seconds: this process's user + system time in the round). Only the list loop is timed:
interpreter start, imports and the handshake are left out, in the SDK's favour.
"""

import json
import sys
import time

import anyio
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


async def walk(session: ClientSession) -> None:
    started = time.perf_counter()
    cpu_started = time.process_time()
    cursor = None
    resources = 0
    pages = 0
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        result = await session.list_resources(params=params)
        resources += len(result.resources)
        pages += 1
        cursor = result.next_cursor
        if not cursor:
            break
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started
    print(
        json.dumps(
            {"seconds": seconds, "cpu_seconds": cpu_seconds, "resources": resources, "pages": pages}
        ),
        flush=True,
    )


async def main() -> None:
    kind = sys.argv[1]
    if kind == "http":
        url, rounds = sys.argv[2], int(sys.argv[3])
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for _ in range(rounds):
                    await walk(session)
    else:
        rounds, command, args = int(sys.argv[2]), sys.argv[3], sys.argv[4:]
        parameters = StdioServerParameters(command=command, args=args)
        async with stdio_client(parameters) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for _ in range(rounds):
                    await walk(session)


anyio.run(main)
