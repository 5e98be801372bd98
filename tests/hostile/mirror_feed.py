#!/usr/bin/env python3
"""A hostile MCP server over stdio that claims to be an mcp-mirror (the feed capability) and
lies in its change feed. Usage: mirror_feed.py MODE COUNTS_FILE FEED_VERSION

MODE: stuck (catalog/changes says `more` and lists nothing, forever), backwards (the feed's
seqs go back), endless (a new seq for the same key on every page, `more` forever), flip (a
new database id in every answer), count (catalog/entries answers keys not asked, duplicates,
and a total that never matches), fat (catalog/entries answers the one key asked and FAT_ENTRIES
small entries never asked, all in one answer; FAT_ENTRIES from the environment, 300,000 unless
set). Every request's method is counted in COUNTS_FILE (JSON)."""
import json
import os
import sys

mode, counts_path, feed_version = sys.argv[1], sys.argv[2], int(sys.argv[3])
counts = {}
answers = 0
RESOURCE = {"uri": "hostile://a", "name": "a", "mimeType": "text/plain"}
FAT_ENTRIES = int(os.environ.get("FAT_ENTRIES", "300000"))


def instance():
    return f"db-{answers}" if mode == "flip" else "db-hostile"


def changes(params):
    since = params.get("since", 0)
    page = {"changes": [], "latestSeq": 5, "truncated": False, "more": False,
            "instance": instance()}

    def change(seq):
        return {"seq": seq, "atMs": 0, "server": "up", "kind": "changed",
                "uri": "hostile://a", "count": 1, "entryKind": "resource"}

    if mode == "stuck":
        page.update(more=True, latestSeq=since + 1)
    elif mode == "backwards":
        page.update(changes=[change(since + 1), change(since - 3)], more=True,
                    latestSeq=since + 1)
    elif mode == "endless":
        page.update(changes=[change(since + 1)], more=True, latestSeq=since + 2)
    elif mode in ("count", "fat"):
        page.update(changes=[change(6)], latestSeq=6)
    return page


def entries(params):
    keys = params.get("keys", [])
    seq = 6 if mode in ("count", "fat") and keys else 5
    answer = {"instance": instance(), "seq": seq, "entries": [], "missing": [], "total": 1}
    if keys:
        answer["entries"] = [RESOURCE, RESOURCE, {"uri": "hostile://not-asked", "name": "x"}]
        if mode == "count":
            answer["total"] = 99
        if mode == "fat":
            answer["entries"] = [RESOURCE] + [
                {"uri": f"hostile://unasked/{index}", "name": "x"} for index in range(FAT_ENTRIES)]
    return answer


def result(method, params):
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"resources": {},
                                 "experimental": {"io.mcp-mirror/feed": {"version": feed_version}}},
                "serverInfo": {"name": "hostile-mirror", "version": "1"}}
    if method == "resources/list":
        return {"resources": [RESOURCE]}
    if method == "resources/templates/list":
        return {"resourceTemplates": []}
    if method == "catalog/tools":
        return {"tools": []}
    if method == "catalog/prompts":
        return {"prompts": []}
    if method == "catalog/changes":
        return changes(params)
    if method == "catalog/entries":
        return entries(params)
    if method == "ping":
        return {}
    return None


for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    method = message["method"]
    counts[method] = counts.get(method, 0) + 1
    with open(counts_path + ".tmp", "w") as file:
        json.dump(counts, file)
    import os
    os.replace(counts_path + ".tmp", counts_path)
    answers += 1
    answer = result(method, message.get("params") or {})
    if answer is None:
        reply = {"jsonrpc": "2.0", "id": message["id"],
                 "error": {"code": -32601, "message": f"no method {method}"}}
    else:
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
