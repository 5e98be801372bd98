#!/usr/bin/env python3
"""A stdio MCP server that serves one LiveMCPBench server's recorded tool list (bench only).

The benchmark's real servers need the network, API keys and their own runtimes; the search
only sees what `tools/list` answers, so this serves the recorded names, descriptions and
parameters (each parameter as a string property with its recorded description).
Usage: server.py TOOLS.json (a JSON list of MCP tool definitions).
"""
import json
import sys

tools = json.load(open(sys.argv[1], encoding="utf-8"))


def answer(request_id, result=None, error=None):
    message = {"jsonrpc": "2.0", "id": request_id}
    if error is not None:
        message["error"] = error
    else:
        message["result"] = result
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    request = json.loads(line)
    if "id" not in request or "method" not in request:
        continue
    method = request["method"]
    if method == "initialize":
        answer(request["id"], {
            "protocolVersion": request.get("params", {}).get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "livemcpbench-recorded", "version": "0.1.1"},
        })
    elif method == "tools/list":
        answer(request["id"], {"tools": tools})
    elif method == "ping":
        answer(request["id"], {})
    else:
        answer(request["id"], error={"code": -32601, "message": "method not found"})
