"""An independent reference for the encoder of src/semantic/: a BERT WordPiece tokenizer and a
sentence-transformers forward pass written with numpy alone (float64), from the same model files.

Reads {"model": DIR, "texts": [...]} on stdin and writes {"ids": [[...]], "vectors": [[...]]}.
It shares no code with the Rust side: the tokenizer follows the BERT normalizer and
pre-tokenizer described in tokenizer.json, and the weights are read from model.safetensors
with the format's own layout (an 8-byte header length, a JSON table, raw little-endian data).
"""
import json
import struct
import sys
import unicodedata

import os

# One thread: the test runs beside others on a small machine, and threads only contend there.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def load_tensors(path):
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        table = json.loads(handle.read(length))
        data = handle.read()
    tensors = {}
    for name, info in table.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = {"F32": "<f4", "I64": "<i8"}[info["dtype"]]
        tensors[name] = np.frombuffer(data[start:end], dtype=dtype).reshape(info["shape"])
    return tensors


class WordPiece:
    def __init__(self, tokenizer_json, max_length):
        model = tokenizer_json["model"]
        normalizer = tokenizer_json["normalizer"]
        assert model["type"] == "WordPiece" and normalizer["type"] == "BertNormalizer"
        self.vocab = model["vocab"]
        self.unknown = model["unk_token"]
        self.prefix = model["continuing_subword_prefix"]
        self.max_word = model["max_input_chars_per_word"]
        self.lowercase = normalizer["lowercase"]
        strip = normalizer["strip_accents"]
        self.strip_accents = self.lowercase if strip is None else strip
        self.chinese = normalizer["handle_chinese_chars"]
        self.clean = normalizer["clean_text"]
        self.max_length = max_length

    @staticmethod
    def is_control(char):
        if char in "\t\n\r":
            return False
        return unicodedata.category(char).startswith("C")

    @staticmethod
    def is_whitespace(char):
        return char in "\t\n\r" or char.isspace()

    @staticmethod
    def is_chinese(char):
        code = ord(char)
        return (
            0x4E00 <= code <= 0x9FFF
            or 0x3400 <= code <= 0x4DBF
            or 0x20000 <= code <= 0x2A6DF
            or 0x2A700 <= code <= 0x2B73F
            or 0x2B740 <= code <= 0x2B81F
            or 0x2B920 <= code <= 0x2CEAF
            or 0xF900 <= code <= 0xFAFF
            or 0x2F800 <= code <= 0x2FA1F
        )

    @staticmethod
    def is_punctuation(char):
        code = ord(char)
        if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
            return True
        return unicodedata.category(char).startswith("P")

    def normalize(self, text):
        if self.clean:
            text = "".join(
                " " if self.is_whitespace(c) else c
                for c in text
                if not (ord(c) == 0 or ord(c) == 0xFFFD or self.is_control(c))
            )
        if self.chinese:
            text = "".join(f" {c} " if self.is_chinese(c) else c for c in text)
        if self.strip_accents:
            text = "".join(
                c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn"
            )
        if self.lowercase:
            text = text.lower()
        return text

    def words(self, text):
        words, current = [], ""
        for char in text:
            if self.is_whitespace(char):
                if current:
                    words.append(current)
                current = ""
            elif self.is_punctuation(char):
                if current:
                    words.append(current)
                words.append(char)
                current = ""
            else:
                current += char
        if current:
            words.append(current)
        return words

    def pieces(self, word):
        if len(word) > self.max_word:
            return [self.vocab[self.unknown]]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                candidate = word[start:end]
                if start > 0:
                    candidate = self.prefix + candidate
                if candidate in self.vocab:
                    found = self.vocab[candidate]
                    break
                end -= 1
            if found is None:
                return [self.vocab[self.unknown]]
            pieces.append(found)
            start = end
        return pieces

    def encode(self, text):
        ids = []
        for word in self.words(self.normalize(text)):
            ids.extend(self.pieces(word))
        ids = ids[: self.max_length - 2]
        return [self.vocab["[CLS]"]] + ids + [self.vocab["[SEP]"]]


def layer_norm(x, weight, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias


def gelu(x):
    from math import erf, sqrt

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / sqrt(2.0)))


def forward(t, config, ids):
    eps = config["layer_norm_eps"]
    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    size = hidden // heads
    n = len(ids)
    x = (
        t["embeddings.word_embeddings.weight"][ids]
        + t["embeddings.position_embeddings.weight"][:n]
        + t["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
    for number in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{number}."

        def linear(name, value):
            return value @ t[p + name + ".weight.T"] + t[p + name + ".bias"]

        q = linear("attention.self.query", x).reshape(n, heads, size).transpose(1, 0, 2)
        k = linear("attention.self.key", x).reshape(n, heads, size).transpose(1, 0, 2)
        v = linear("attention.self.value", x).reshape(n, heads, size).transpose(1, 0, 2)
        # The scale in the tensors' own precision (a numpy float64 scalar would widen float32).
        scores = q @ k.transpose(0, 2, 1) / x.dtype.type(np.sqrt(size))
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores = scores / scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(1, 0, 2).reshape(n, hidden)
        x = layer_norm(
            x + linear("attention.output.dense", context),
            t[p + "attention.output.LayerNorm.weight"],
            t[p + "attention.output.LayerNorm.bias"],
            eps,
        )
        inner = gelu(linear("intermediate.dense", x))
        x = layer_norm(
            x + linear("output.dense", inner),
            t[p + "output.LayerNorm.weight"],
            t[p + "output.LayerNorm.bias"],
            eps,
        )
    pooled = x.mean(axis=0)
    return pooled / max(np.linalg.norm(pooled), 1e-12)


def main():
    request = json.load(sys.stdin)
    model = request["model"]
    with open(model + "/config.json") as handle:
        config = json.load(handle)
    with open(model + "/tokenizer.json") as handle:
        tokenizer_json = json.load(handle)
    with open(model + "/sentence_bert_config.json") as handle:
        max_length = json.load(handle)["max_seq_length"]
    with open(model + "/1_Pooling/config.json") as handle:
        assert json.load(handle)["pooling_mode_mean_tokens"]
    tokenizer = WordPiece(tokenizer_json, max_length)
    tensors = {
        name: value.astype(np.float64)
        for name, value in load_tensors(model + "/model.safetensors").items()
        if value.dtype != np.int64
    }
    # Each linear layer's weight transposed once, contiguous, so every product is one BLAS call.
    for name in [name for name in tensors if name.startswith("encoder.") and name.endswith(".weight")]:
        if tensors[name].ndim == 2:
            tensors[name + ".T"] = np.ascontiguousarray(tensors[name].T)
    ids = [tokenizer.encode(text) for text in request["texts"]]
    vectors = [forward(tensors, config, each).tolist() for each in ids]
    json.dump({"ids": ids, "vectors": vectors}, sys.stdout)


if __name__ == "__main__":
    main()
