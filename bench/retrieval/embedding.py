#!/usr/bin/env python3
"""`bench/run embedding`: a question's embedding through the daemon, beside numpy's forward
pass of the same model on the same host, question by question.

Mirrors LiveMCPBench's 526 tools with `[search] semantic_model` (as `bench/run retrieval` does),
waits until every tool has its vector, then for each of the 95 questions, each asked once (the
daemon keeps recent question vectors: a repeated question would time the cache):
  - the daemon: `catalog/search {query, kinds: [tool], limit: 10, mode: semantic}` through the
    socket, timed by this client (tokenizing, the forward pass, the scan of 526 vectors, the
    answer's JSON and the round trip);
  - numpy: tests/semantic/reference.py's forward pass in float32 on one OpenBLAS thread, with
    its element-wise erf replaced by a vectorized one (the reference's `np.vectorize(erf)` is a
    Python loop, there for exactness, not speed), timed around the forward pass alone.
The two run interleaved, so both meet the same load. Prints the medians, their ratio, the
median token count, and the host's CPU model and vector flags.

Options: --semantic-model=DIR (default target/models/all-MiniLM-L6-v2), --binary=PATH (default
target/release/mcp-mirror), --semantic-precision=f32|bf16 (`[search] semantic_precision`; the
daemon's default otherwise). Run it with a Python that has numpy: `bench/run embedding`
installs the tests' venv (tests/interop/install.sh: numpy and the model) and uses
target/py/bin/python.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "semantic"))

import reference  # noqa: E402
import run as retrieval  # noqa: E402

VECTOR_FLAGS = ["sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"]


def host():
    model, flags = "unknown CPU", set()
    for line in open("/proc/cpuinfo", encoding="utf-8"):
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            break
    shown = [flag for flag in VECTOR_FLAGS if flag in flags]
    return f"{model}, {os.cpu_count()} cores, flags: {' '.join(shown)}"


def revision():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def fast_erf(x):
    """Abramowitz and Stegun 7.1.26 (error below 1.5e-7), element-wise in numpy."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                           + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def numpy_encoder(model):
    config = retrieval.json.load(open(model + "/config.json"))
    tokenizer_json = retrieval.json.load(open(model + "/tokenizer.json"))
    max_length = retrieval.json.load(open(model + "/sentence_bert_config.json"))["max_seq_length"]
    tokenizer = reference.WordPiece(tokenizer_json, max_length)
    tensors = {name: value.astype(np.float32)
               for name, value in reference.load_tensors(model + "/model.safetensors").items()
               if value.dtype != np.int64}
    for name in [n for n in tensors if n.startswith("encoder.") and n.endswith(".weight")]:
        if tensors[name].ndim == 2:
            tensors[name + ".T"] = np.ascontiguousarray(tensors[name].T)
    reference.gelu = lambda x: 0.5 * x * (1.0 + fast_erf(x / np.float32(np.sqrt(2.0))))
    return tokenizer, tensors, config


def main():
    model = retrieval.option("semantic-model",
                             os.path.join(ROOT, "target", "models", "all-MiniLM-L6-v2"))
    binary = retrieval.option("binary", os.path.join(ROOT, "target", "release", "mcp-mirror"))
    catalog, tasks = retrieval.load(retrieval.install())
    questions = [question for question, _ in tasks]
    tokenizer, tensors, config = numpy_encoder(model)
    scratch = os.path.join(ROOT, "target", "tmp")
    os.makedirs(scratch, exist_ok=True)
    directory = tempfile.mkdtemp(prefix="embedding-", dir=scratch)
    process, client = retrieval.start_daemon(binary, catalog, directory, model)
    daemon_ms, numpy_ms, tokens = [], [], []
    try:
        # One warm-up of each, on a text no question repeats.
        client.call("catalog/search", {"query": "warm up the encoder", "kinds": ["tool"],
                                       "limit": 10, "mode": "semantic"})
        reference.forward(tensors, config, tokenizer.encode("warm up the encoder"))
        for question in questions:
            began = time.perf_counter()
            client.call("catalog/search", {"query": question, "kinds": ["tool"], "limit": 10,
                                           "mode": "semantic"})
            daemon_ms.append((time.perf_counter() - began) * 1000)
            ids = tokenizer.encode(question)
            tokens.append(len(ids))
            began = time.perf_counter()
            reference.forward(tensors, config, ids)
            numpy_ms.append((time.perf_counter() - began) * 1000)
    finally:
        process.terminate()
        process.wait(timeout=30)
    daemon, numpy_median = statistics.median(daemon_ms), statistics.median(numpy_ms)
    print(f"host: {host()}")
    print(f"revision {revision()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load {os.getloadavg()[0]:.1f}; {len(questions)} LiveMCPBench questions, each once, "
          f"median {statistics.median(tokens):.0f} tokens (min {min(tokens)}, max {max(tokens)})")
    print("| | p50 | p90 | max |")
    print("|---|---|---|---|")
    for label, times in (("daemon: catalog/search mode semantic, through the socket", daemon_ms),
                         ("numpy float32 forward pass, one OpenBLAS thread", numpy_ms)):
        ordered = sorted(times)
        print(f"| {label} | {statistics.median(ordered):.2f} ms | "
              f"{ordered[int(len(ordered) * 0.9)]:.2f} ms | {ordered[-1]:.2f} ms |")
    print(f"ratio of the medians, daemon / numpy: {daemon / numpy_median:.2f}")


if __name__ == "__main__":
    main()
