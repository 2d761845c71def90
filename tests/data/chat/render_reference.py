# Reference renderer: jinja2 configured as transformers' apply_chat_template does.
import json, sys
from datetime import datetime
import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

class AssistantTracker(Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)
    def _render(self, caller):
        return caller()

def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    def strftime_now(format):
        return datetime.now().strftime(format)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env

def render_case(env, tmpl, cfg, c):
    kw = {}
    for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = cfg.get(k)
        if isinstance(v, dict): v = v.get("content")
        if isinstance(v, str): kw[k] = v
    for k in ("bos_token", "eos_token"):
        if isinstance(c.get(k), str): kw[k] = c[k]
    kw.update(c.get("extra") or {})
    try:
        out = tmpl.render(messages=c["messages"], tools=c.get("tools"), documents=None,
                          add_generation_prompt=c.get("add_generation_prompt", False), **kw)
        return {"rendered": out}
    except Exception as e:
        return {"error": str(e)}

if __name__ == "__main__":
    cfg = json.load(open(sys.argv[1]))
    env = make_env()
    tmpl = env.from_string(cfg["chat_template"])
    for line in open(sys.argv[2]):
        if line.strip():
            print(json.dumps(render_case(env, tmpl, cfg, json.loads(line)), ensure_ascii=False))
