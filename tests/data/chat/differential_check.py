# Differential check of `pagedkv chat-format` against jinja2 (set up as transformers
# does, render_reference.py) on seeded random conversations, for any tokenizer configs.
# Usage: python3 differential_check.py PATH/TO/pagedkv SEED COUNT CONFIG.json...
import json, os, random, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from render_reference import make_env, render_case
rng = random.Random(0)
def rtext():
    pieces = ["hello", " ", "\n", "\n\n", "  ", "\t", "你好", "😀", "é", "<think>", "</think>", "<tool_response>", "</tool_response>",
              "\"q\"", "'s'", "\\", "{x}", "{{ y }}", "{% z %}", "\u3000", "\u00a0", "\r\n", "a", "b.", "</tools>", "<|im_end|>"]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
def rjson(depth=0):
    k = rng.randint(0, 7 if depth < 2 else 4)
    if k == 0: return rng.choice([1, -5, 0, 123456789012, 2**53])
    if k == 1: return rng.choice([1.5, 0.1, -0.0, 1e-7, 3e20, 100.0, 2.5e-5, 1/3])
    if k == 2: return rtext()
    if k == 3: return rng.choice([True, False, None])
    if k == 4: return rng.choice(["", "x", "é\n\t\"\\"])
    if k == 5: return [rjson(depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "b", "城市", "z", "type", "name", "k k"]) + str(i): rjson(depth + 1) for i in range(rng.randint(0, 3))}
def rtool():
    t = {"type": "function", "function": {"name": rng.choice(["f", "get_weather", "天気"]), "description": rtext(),
         "parameters": {"type": "object", "properties": {"p": {"type": "string", "description": rtext()}, "n": {"type": "number"}}, "required": ["p"]}}}
    if rng.random() < 0.3: t["function"]["extra"] = rjson()
    if rng.random() < 0.1: t = {"name": "bare", "parameters": rjson()}
    return t
def rtoolcall():
    args = rng.choice([rjson(), {"city": rtext()}, json.dumps({"x": 1}), rtext(), {}])
    fn = {"name": rng.choice(["f", "g", "天気"]), "arguments": args}
    return {"type": "function", "function": fn} if rng.random() < 0.8 else fn
def rcontent(gemma):
    r = rng.random()
    if gemma and r < 0.15:
        return [rng.choice([{"type": "text", "text": rtext()}, {"type": "image"}, {"type": "text", "text": " " + rtext()}]) for _ in range(rng.randint(1, 3))]
    if r < 0.04: return None
    if r < 0.3: return "<think>" + rtext() + "</think>" + rtext()
    if r < 0.35: return "<tool_response>" + rtext() + "</tool_response>"
    return rtext()
def rconv(gemma):
    msgs = []
    n = rng.randint(1, 7)
    if rng.random() < 0.4: msgs.append({"role": "system", "content": rcontent(gemma)})
    alt = rng.random() < 0.7
    for i in range(n):
        if alt: role = "user" if i % 2 == 0 else "assistant"
        else: role = rng.choice(["user", "assistant", "tool", "system", "user"])
        m = {"role": role, "content": rcontent(gemma)}
        if role == "assistant":
            if rng.random() < 0.3: m["tool_calls"] = [rtoolcall() for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.2: m["reasoning_content"] = rng.choice([rtext(), None, ""])
            if m["content"] is None and rng.random() < 0.5: m["content"] = ""
        msgs.append(m)
        if role == "assistant" and "tool_calls" in m and rng.random() < 0.7:
            for _ in range(rng.randint(1, 2)): msgs.append({"role": "tool", "content": rtext()})
    return msgs
seed, N = int(sys.argv[2]), int(sys.argv[3])
for cfgpath in sys.argv[4:]:
    rng.seed(seed)
    cfg = json.load(open(cfgpath))
    env = make_env(); tmpl = env.from_string(cfg["chat_template"])
    cases = []
    for i in range(N):
        extra = rng.choice([None, {}, {"enable_thinking": False}, {"builtin_tools": ["brave_search", "code_interpreter"]}, {"tools_in_user_message": False}, {"custom_tools": [rtool()]}])
        c = {"case": str(i), "messages": rconv(rng.random() < 0.5), "add_generation_prompt": rng.random() < 0.6,
             "tools": rng.choice([None, [], [rtool()]]), "extra": extra}
        cases.append(c)
    path = os.path.join(tempfile.mkdtemp(), "cases.jsonl")
    open(path, "w").write("\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n")
    p = subprocess.run([sys.argv[1], "chat-format", "--tokenizer-config", cfgpath, "--jsonl", path], capture_output=True, text=True)
    if p.returncode != 0 and not p.stdout:
        print(cfgpath, "FAILED:", p.stderr); continue
    outs = [json.loads(l) for l in p.stdout.splitlines()]
    bad = errs = 0
    for c, o in zip(cases, outs):
        r = render_case(env, tmpl, cfg, c)
        errs += "error" in r
        if r != o:
            bad += 1
            if bad <= 4:
                print(cfgpath, "MISMATCH", json.dumps(c, ensure_ascii=False)[:800]); print("  jinja2:", repr(r)[:500]); print("  ours:  ", repr(o)[:500])
    print(cfgpath, len(cases), "cases", errs, "errors", bad, "mismatches")
