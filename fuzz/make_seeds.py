#!/usr/bin/env python3
"""Regenerates the seed corpora fuzz/corpus/<target>/ and fuzz/data/ from the
test data (tests/data, models/default) and from small hand-written inputs.

Run from the repository root: python3 fuzz/make_seeds.py. Deterministic; the
output is checked in (docs/fuzzing.md). Multi-part inputs separate their parts
with a NUL byte (fuzz/fuzz_util.h).
"""
import hashlib
import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUZZ = os.path.join(ROOT, "fuzz")
CORPUS = os.path.join(FUZZ, "corpus")
SEP = b"\0"


def out(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(*p):
    with open(os.path.join(ROOT, *p), "rb") as f:
        return f.read()


# ---- safetensors ------------------------------------------------------------
def safetensors(tensors, metadata=None, pad=True):
    header, data = {}, b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def seeds_safetensors():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    out("safetensors", "f32_2x2", safetensors([("w", "F32", [2, 2], f32)],
                                              {"format": "pt"}))
    out("safetensors", "mixed", safetensors([
        ("a.bf16", "BF16", [3], b"\x80\x3f\x00\x40\x40\x40"),
        ("b.f16", "F16", [1, 2], b"\x00\x3c\x00\xc0"),
        ("ids", "I64", [3], struct.pack("<3q", 1, 2, 3)),
        ("i32", "I32", [2], struct.pack("<2i", -1, 7)),
        ("u8", "U8", [2], b"\x01\x02"), ("i8", "I8", [1], b"\xff"),
        ("f64", "F64", [1], struct.pack("<d", 0.25)), ("flag", "BOOL", [1], b"\x01"),
    ]))
    out("safetensors", "scalar_and_empty", safetensors([
        ("s", "F32", [], struct.pack("<f", 2.0)), ("e", "F32", [0, 4], b"")]))
    out("safetensors", "no_tensors", safetensors([], {"k": "v"}))
    out("safetensors", "unpadded", safetensors([("w", "F32", [1], f32[:4])], pad=False))
    out("safetensors", "input_ids", safetensors([("input_ids", "I64", [1, 4],
                                                  struct.pack("<4q", 9707, 11, 1879, 0))]))


# ---- config.json --------------------------------------------------------------
def seeds_config():
    # The tiny preset (src/model/make_model.cc) the fuzz target's weights come from.
    for fam in ("qwen3", "qwen3_moe"):
        out("config", "hf_" + fam, read("tests", "data", "hf-reference", fam + "-a",
                                        "config.json"))
    fx = "/work/shared/fixtures/hf-reference"
    if os.path.isdir(fx):
        for fam in sorted(os.listdir(fx)):
            p = os.path.join(fx, fam, "config.json")
            if os.path.exists(p) and fam not in ("qwen3-a", "qwen3_moe-a"):
                with open(p, "rb") as f:
                    out("config", "fixture_" + fam, f.read())
    out("config", "default_model", read("models", "default", "config.json") + SEP +
        read("models", "default", "generation_config.json"))


def seeds_config_from_dirs(dirs):
    """Configs of the tiny checkpoints the target builds (written by make-model)."""
    for name, path in dirs:
        with open(os.path.join(path, "config.json"), "rb") as f:
            c = f.read()
        out("config", "tiny_" + name, c)
        j = json.loads(c)
        j["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
        j["use_sliding_window"] = True
        j["sliding_window"] = 8
        j["max_window_layers"] = 1
        j["paged_block_size"] = 8
        j["use_block_paged_cache"] = True
        j["eos_token_id"] = [2, 3]
        out("config", "tiny_" + name + "_variants",
            json.dumps(j).encode() + SEP + b'{"eos_token_id": [4, 5]}')


# ---- tokenizer.json -------------------------------------------------------------
def seeds_tokenizer():
    comp = json.loads(read("tests", "data", "tokenizer", "components.json"))
    texts = {}
    for case in comp["cases"]:
        texts.setdefault(case["variant"], case["text"])
    for i, (name, tok) in enumerate(sorted(comp["variants"].items())):
        text = texts.get(name, "Hello, world! 123 héllo")
        # Every third seed has a tokenizer_config.json naming tokens of its vocabulary.
        added = [a["content"] for a in tok.get("added_tokens") or []]
        vocab = list((tok.get("model") or {}).get("vocab") or {})
        specials = added + vocab[:2]
        cfg = b""
        if i % 3 == 0 and specials:
            cfg = json.dumps({"bos_token": specials[0],
                              "eos_token": {"content": specials[-1]}}).encode()
        out("tokenizer", name, json.dumps(tok, ensure_ascii=False).encode() + SEP + cfg + SEP +
            text.encode())
    return comp


# ---- chat templates -------------------------------------------------------------
SMALL_TEMPLATES = {
    "chatml": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
              "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "macro_ns": "{% macro f(x, y=2) %}{{ x * y }}{% endmacro %}{% set ns = namespace(n=0) %}"
                "{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ f(loop.index) }}"
                "{% endfor %}{{ ns.n }}",
    "filters": "{{ messages | length }}{{ messages[0].content | upper | trim }}"
               "{{ tools | tojson(indent=2) }}{{ 'a,b' .split(',') | join('-') }}"
               "{{ messages[-1]['content'] is string }}{{ (messages | map(attribute='role') | list)[1:3] }}",
    "raise": "{% if messages[0].role != 'system' %}{{ raise_exception('need system') }}{% endif %}",
    "tests_ops": "{% for i in range(3) if i is odd %}{{ i ~ '-' }}{% else %}none{% endfor %}"
                 "{{ 7 // 2 }}{{ 7 % 3 }}{{ 2 ** 3 }}{{ 'x' in 'xyz' }}{{ none is none }}"
                 "{{ {'a': 1}.items() | list }}{{ bos_token + eos_token }}",
    "whitespace": "{%- for m in messages -%}\n  {{- m.content | replace('a', 'b') -}}\n"
                  "{%- endfor %}{# comment #}{% raw %}{{ raw }}{% endraw %}",
    "strings": "{{ messages[0].content.startswith('B') }}{{ 'abc'[::-1] }}{{ '%s-%d' % ('a', 3) }}"
               "{{ 'x'.center(5) }}{{ 'a\\nb' | indent(2) }}{{ messages[0].content.split() }}",
}


def seeds_chat():
    lines = []
    for f in ("chat-qwen3-a.jsonl", "chat-gemma3-a.jsonl"):
        for ln in read("tests", "data", "chat", f).decode().splitlines()[:4]:
            j = json.loads(ln)
            lines.append(json.dumps({k: j[k] for k in
                                     ("messages", "tools", "add_generation_prompt", "extra")
                                     if k in j}))
    n = 0
    for f, name in (("qwen3_tokenizer_config.json", "qwen3"),
                    ("gemma3_tokenizer_config.json", "gemma3")):
        cfg = json.loads(read("tests", "data", "chat", f))
        out("chat_template", name + "_config", read("tests", "data", "chat", f) + SEP +
            lines[0].encode())
        for i, ln in enumerate(lines[:3]):
            out("chat_template", "%s_%d" % (name, i), cfg["chat_template"].encode() + SEP +
                ln.encode())
    dflt = json.loads(read("models", "default", "tokenizer_config.json"))
    if isinstance(dflt.get("chat_template"), str):
        out("chat_template", "default_model", dflt["chat_template"].encode() + SEP +
            lines[1].encode())
    for name, t in SMALL_TEMPLATES.items():
        out("chat_template", "small_" + name, t.encode() + SEP + lines[n % len(lines)].encode())
        n += 1
    return lines


# ---- cold objects ---------------------------------------------------------------
def cold_object(tokens, dtype=1, layers=1, heads=1, head_dim=2, v_head_dim=2, block_size=4,
                group=1, seed=0):
    esize = {1: 4, 2: 2, 3: 2}[dtype]
    payload_len = layers * (block_size * heads * head_dim + block_size * heads * v_head_dim) * esize
    payload = bytes((seed + i * 7) & 0xFF for i in range(payload_len))
    header_len = 200 + 4 * len(tokens) + 32
    h = bytearray(200)
    h[0:8] = b"PKVCOLD\0"
    struct.pack_into("<IIII", h, 8, 1, header_len, 1, group)
    h[24:56] = hashlib.sha256(b"fingerprint%d" % seed).digest()
    h[56:88] = hashlib.sha256(b"key%d" % seed).digest()
    h[88:120] = hashlib.sha256(b"parent%d" % seed).digest()
    struct.pack_into("<QI", h, 120, seed, len(tokens))
    struct.pack_into("<IIIIIII", h, 132, dtype, layers, heads, head_dim, v_head_dim, block_size, 0)
    struct.pack_into("<Q", h, 160, payload_len)
    h[168:200] = hashlib.sha256(payload).digest()
    h += b"".join(struct.pack("<i", t) for t in tokens)
    h += hashlib.sha256(bytes(h)).digest()
    return bytes(h) + payload


def seeds_cold():
    out("cold_object", "f32_full", cold_object([1, 2, 3, 4]))
    out("cold_object", "f16_partial", cold_object([5, 6], dtype=2, layers=2, heads=2, seed=1))
    out("cold_object", "bf16_sliding", cold_object([7], dtype=3, group=2, head_dim=4,
                                                   v_head_dim=2, block_size=2, seed=2))
    out("cold_object", "sidecar_no_tokens", cold_object([], group=3, seed=3))


# ---- JSONL (tokenize / detokenize / chat-format) --------------------------------
def seeds_jsonl(lines):
    tok_lines = read("tests", "data", "tokenizer", "tok-qwen3-a.jsonl").decode().splitlines()[:6]
    texts = "\n".join(json.dumps({"text": json.loads(l)["text"]}) for l in tok_lines) + "\n"
    out("jsonl", "tokenize", b"\x00" + texts.encode())
    ids = "\n".join(json.dumps({"ids": [i % 270 for i in json.loads(l)["ids"]]})
                    for l in tok_lines) + "\n\n" + '{"ids": []}\n'
    out("jsonl", "detokenize", b"\x01" + ids.encode())
    out("jsonl", "chat_format", b"\x02" + ("\n".join(lines[:4]) + "\n").encode())
    out("jsonl", "errors", b"\x02" + b'{"messages": 3}\n[1]\nnot json\n{"messages": [], '
        b'"tools": 1}\n')


def data_files(comp):
    os.makedirs(os.path.join(FUZZ, "data"), exist_ok=True)
    tok = comp["variants"]["bytelevel_added"]
    with open(os.path.join(FUZZ, "data", "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    # Qwen3's chat template, with special tokens this small vocabulary has.
    cfg = json.loads(read("tests", "data", "chat", "qwen3_tokenizer_config.json"))
    cfg = {"chat_template": cfg["chat_template"], "bos_token": None, "eos_token": "<|end|>",
           "pad_token": "<|end|>"}
    with open(os.path.join(FUZZ, "data", "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)


def main():
    import sys
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    seeds_safetensors()
    seeds_config()
    if len(sys.argv) > 1:  # make-model output dirs: name=path
        seeds_config_from_dirs([a.split("=", 1) for a in sys.argv[1:]])
    comp = seeds_tokenizer()
    lines = seeds_chat()
    seeds_cold()
    seeds_jsonl(lines)
    data_files(comp)


if __name__ == "__main__":
    main()
