# Seeded random chat conversations for the template tests: text with template
# metacharacters and CJK/emoji, JSON values, tools, tool calls, content parts and
# role orders that real templates must cope with. Shared by make_random_cases.py
# (the checked-in fixtures) and differential_check.py (ad-hoc differential runs).
# Every draw comes from the `rng` given, in a fixed order, so a seed reproduces
# the same conversations.
import json
from types import SimpleNamespace


def generators(rng):
    """Returns rtext, rjson, rtool, rtoolcall, rcontent, rconv drawing from rng."""
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
    return SimpleNamespace(rtext=rtext, rjson=rjson, rtool=rtool, rtoolcall=rtoolcall,
                           rcontent=rcontent, rconv=rconv)
