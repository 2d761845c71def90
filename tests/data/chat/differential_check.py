# Differential check of `pagedkv chat-format` against jinja2 (set up as transformers
# does, render_reference.py) on seeded random conversations, for any tokenizer configs.
# Usage: python3 differential_check.py PATH/TO/pagedkv SEED COUNT CONFIG.json...
import json, os, random, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from random_conversation import generators
from render_reference import make_env, render_case
rng = random.Random(0)
g = generators(rng)
rtool, rconv = g.rtool, g.rconv
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
