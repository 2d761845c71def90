# Writes chat-<model>-random.jsonl: seeded random conversations (roles out of order,
# tool calls with dict/string arguments, reasoning_content, content None or parts,
# tools with assorted JSON, enable_thinking) rendered by Python jinja2 configured as
# transformers' apply_chat_template (render_reference.py). Needs jinja2 3.1.
# Usage: python3 make_random_cases.py SEED COUNT   (run in this directory)
import json, random, sys
from random_conversation import generators
from render_reference import make_env, render_case
rng = random.Random(int(sys.argv[1]))
N = int(sys.argv[2])
g = generators(rng)
rtool, rconv = g.rtool, g.rconv
for model in ["qwen3", "gemma3"]:
    cfg = json.load(open(model + "_tokenizer_config.json"))
    env = make_env(); tmpl = env.from_string(cfg["chat_template"])
    lines = []
    for i in range(N):
        extra = rng.choice([None, {}, {"enable_thinking": True}, {"enable_thinking": False}, {"enable_thinking": None}])
        tools = rng.choice([None, None, [], [rtool()], [rtool(), rtool()]])
        c = {"case": f"random-{i}", "messages": rconv(model == "gemma3"), "add_generation_prompt": rng.random() < 0.6, "tools": tools, "extra": extra}
        if rng.random() < 0.3: c["bos_token"] = rng.choice(["", "<bos>", "<s>"])
        c.update(render_case(env, tmpl, cfg, c))
        lines.append(json.dumps(c, ensure_ascii=False))
    open(f"chat-{model}-random.jsonl", "w").write("\n".join(lines) + "\n")
