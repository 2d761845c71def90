// Unit tests of the Jinja engine on small templates whose jinja2 3.1 output
// (trim_blocks, lstrip_blocks, loopcontrols, sandboxed, transformers' tojson) is
// known: whitespace control, loops, scoping, namespace, slicing, tojson, string
// methods, Python printing and arithmetic, undefined semantics, errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "jinja/jinja_template.h"

namespace pagedkv::jinja {
namespace {

std::string render(const std::string& src, const std::string& vars_json = "{}") {
  auto t = Template::compile(src);
  if (!t.ok()) return "COMPILE ERROR: " + t.status().message();
  std::vector<std::pair<std::string, Value>> vars;
  auto j = nlohmann::ordered_json::parse(vars_json);
  for (auto it = j.begin(); it != j.end(); ++it) vars.emplace_back(it.key(), from_json(it.value()));
  auto out = (*t)->render(vars);
  if (!out.ok()) return "RENDER ERROR: " + out.status().message();
  return *out;
}

// The bare jinja2 exception message of a failing render.
TemplateError render_error(const std::string& src, const std::string& vars_json = "{}") {
  TemplateError err;
  auto t = Template::compile(src, &err);
  if (!t.ok()) return err;
  std::vector<std::pair<std::string, Value>> vars;
  auto j = nlohmann::ordered_json::parse(vars_json);
  for (auto it = j.begin(); it != j.end(); ++it) vars.emplace_back(it.key(), from_json(it.value()));
  auto out = (*t)->render(vars, &err);
  EXPECT_FALSE(out.ok()) << "rendered: " << (out.ok() ? *out : "");
  return err;
}

// One template, its expected output, and the variables it renders with.
struct RenderCase {
  std::string src;
  std::string want;
  std::string vars = "{}";
};

// Renders each case and expects its output (a failure names the template).
void expect_renders(const std::vector<RenderCase>& cases) {
  for (const RenderCase& c : cases)
    EXPECT_EQ(render(c.src, c.vars), c.want) << "template: " << c.src;
}

// Renders each case and expects that bare jinja2 exception message.
void expect_render_errors(const std::vector<RenderCase>& cases) {
  for (const RenderCase& c : cases)
    EXPECT_EQ(render_error(c.src, c.vars).message, c.want) << "template: " << c.src;
}

TEST(JinjaWhitespace, TrimBlocksRemovesNewlineAfterTag) {
  expect_renders({
      {"{% if true %}\n  yes\n{% endif %}\n", "  yes\n"},
      {"{% if true +%}\nx{% endif %}", "\nx"},
      {"{# c #}\nb", "b"},
  });
}

TEST(JinjaWhitespace, LstripBlocksOnlyForBlocksAtLineStart) {
  expect_renders({
      {"a\n    {% if true %}b{% endif %}", "a\nb"},
      {"a\n    {%+ if true %}b{% endif %}", "a\n    b"},
      {"a\n    {{ 'x' }}", "a\n    x"},
      {"a {% if true %}x{% endif %}", "a x"},
      {"  {% if true %}x{% endif %}", "x"},
      {"a\n  {# c #}\nb", "a\nb"},
      {"{% if true %}\n  {% if true %}\n  x\n  {% endif %}\n{% endif %}", "  x\n"},
  });
}

TEST(JinjaWhitespace, MinusStripsAllWhitespace) {
  expect_renders({
      {"a  \n {%- if true -%}  \n b {%- endif %}", "ab"},
      {"a  {{- 'x' -}}  b", "axb"},
      {"x {#- c -#} y", "xy"},
      {"a\u3000{{- 'x' }}", "ax"},  // Unicode whitespace, as Python's rstrip()
  });
}

TEST(JinjaWhitespace, NewlinesNormalisedAndOneTrailingNewlineDropped) {
  expect_renders({
      {"x\n", "x"},
      {"x\n\n", "x\n"},
      {"a\r\nb\rc", "a\nb\nc"},
      {"{% raw %}{{ x }}{% endraw %}", "{{ x }}"},
  });
}

TEST(JinjaLoop, LoopVariables) {
  expect_renders({
      {"{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
       "{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }},"
       "{% endfor %}",
       "10TrueFalse332,21FalseFalse321,32FalseTrue310,"},
      {"{% for x in [1,2,3] %}{{ loop.cycle('a','b') }}{{ loop.previtem }}{% endfor %}", "ab1a2"},
  });
}

TEST(JinjaLoop, ElseFilterBreakContinue) {
  expect_renders({
      {"{% for x in [] %}a{% else %}empty{% endfor %}", "empty"},
      {"{% for x in none_var %}a{% else %}u{% endfor %}", "u"},
      {"{% for x in range(6) if x is odd %}{{ x }}{{ loop.length }} {% endfor %}", "13 33 53 "},
      {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
       "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
       "0134"},
  });
}

TEST(JinjaLoop, ScopesAndNamespace) {
  expect_renders({
      {"{% set x = 1 %}{% for i in [1,2] %}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}",
       "10201"},
      {"{% for i in [1,2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}", ""},
      {"{% set ns = namespace(n=0, s='') %}{% for i in [1,2,3] %}"
       "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
       "6"},
      {"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;"},
      {"{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", "37"},
      {"{% set a, b = 1, 2 %}{{ b }}{{ a }}", "21"},
      {"{% if true %}{% set t = 5 %}{% endif %}{{ t }}", "5"},
  });
}

TEST(JinjaExpr, Slicing) {
  expect_renders({
      {"{{ [1,2,3,4][::-1] }}", "[4, 3, 2, 1]"},
      {"{{ 'hello'[1:3] }}", "el"},
      {"{{ 'héllo'[::-2] }}", "olh"},
      {"{{ [1,2,3][-1] }}{{ 'abc'[-2] }}", "3b"},
      {"{{ [1,2,3,4,5][1:-1:2] }}", "[2, 4]"},
      {"{{ [1,2,3][5:] }}{{ 'abc'[:100] }}", "[]abc"},
      {"{{ m[1:] | length }}", "2", R"({"m": [1, 2, 3]})"},
  });
}

TEST(JinjaExpr, ToJsonLikeTransformers) {
  expect_renders({
      {"{{ {'a': [1, 2.5, true, none, 'é\"\\n']} | tojson }}",
       "{\"a\": [1, 2.5, true, null, \"é\\\"\\n\"]}"},
      {"{{ {'a': [1, {}], 'b': []} | tojson(indent=2) }}",
       "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}"},
      {"{{ x | tojson }}", "{\"z\": 1, \"a\": \"日本\\u0001\"}",
       R"({"x": {"z": 1, "a": "日本\u0001"}})"},
      {"{{ x | tojson(sort_keys=true) }}", "{\"a\": 2, \"z\": 1}", R"({"x": {"z": 1, "a": 2}})"},
      {"{{ 'é' | tojson(ensure_ascii=true) }}", "\"\\u00e9\""},
      {"{{ [1.0, 1e20, 0.1] | tojson }}", "[1.0, 1e+20, 0.1]"},
  });
}

TEST(JinjaExpr, StringMethods) {
  expect_renders({
      {"{{ '  x y  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|"
       "{{ ' a  b '.split() }}|{{ 'a.b.c'.rsplit('.', 1) }}|{{ 'aaa'.replace('a','b',2) }}|"
       "{{ 'hello world'.title() }}|{{ 'AbC'.lower() }}{{ 'abc'.upper() }}|"
       "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x','c')) }}",
       "x y|hi|['a', 'b', '', 'c']|['a', 'b']|['a.b', 'c']|bba|Hello World|abcABC|TrueTrue"},
      {"{{ '\\n\\nx\\n'.lstrip('\\n') }}|{{ 'x\\n\\n'.rstrip('\\n') }}|"
       "{{ 'a</think>b'.split('</think>')[-1] }}",
       "x\n|x|b"},
      {"{{ '{} and {name}'.format(1, name='x') }}|{{ 'abc'.find('c') }}|"
       "{{ ', '.join(['a', 'b']) }}|{{ 'ab'.removeprefix('a') }}",
       "1 and x|2|a, b|b"},
  });
}

TEST(JinjaExpr, PythonPrinting) {
  expect_renders({
      {"{{ [1, 'a', none, true, 1.0, {'k': 'v'}] }}", "[1, 'a', None, True, 1.0, {'k': 'v'}]"},
      {"{{ (1,) }}{{ (1, 2) }}", "(1,)(1, 2)"},
      {"{{ [\"it's\", 'a\\\\b', '\\n'] }}", "[\"it's\", 'a\\\\b', '\\n']"},
      {"{{ {'b': 1, 'a': 2} }}", "{'b': 1, 'a': 2}"},
      {"{{ none }}|{{ true }}|{{ False }}", "None|True|False"},
      {"{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 100.0 }} {{ 1e16 }} {{ 1e15 }}",
       "0.30000000000000004 1e+20 1.5e-07 100.0 1e+16 1000000000000000.0"},
  });
}

TEST(JinjaExpr, ArithmeticAndLogic) {
  expect_renders({
      {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} "
       "{{ 1 + 2.0 }} {{ 'a' ~ 1 ~ none }} {{ 4 / 2 }} {{ true + 1 }}",
       "3 -4 -2 3.5 1024 abab 3.0 a1None 2.0 2"},
      {"{{ 0 or 'x' }}{{ '' and 'y' }}{{ [] or [1] }}{{ not 0 }}", "x[1]True"},
      {"{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' in 'cat' }}{{ 'x' not in ['y'] }}"
       "{{ 'k' in {'k': 1} }}{{ 1 == 1.0 }}{{ [1] == [1] }}",
       "TrueFalseTrueTrueTrueTrueTrue"},
      {"{{ 'a' if false }}|{{ 'a' if x else 'b' }}|{{ -(3) }}|{{ messages|length - 1 }}", "|b|-3|2",
       R"({"messages": [1, 2, 3]})"},
      {"{{ 'a' 'b' }}{{ \"\\u00e9\\x41\\t|\" }}", "abéA\t|"},
  });
}

TEST(JinjaExpr, Tests) {
  expect_renders({
      {"{{ 1 is number }}{{ true is number }}{{ 'x' is string }}{{ {} is mapping }}"
       "{{ [] is iterable }}{{ 'x' is sequence }}{{ none is none }}{{ true is boolean }}"
       "{{ 1 is true }}{{ true is true }}{{ false is false }}{{ 3 is equalto 3 }}"
       "{{ 4 is divisibleby 2 }}{{ 1 is integer }}{{ true is integer }}",
       "TrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueFalse"},
      {"{{ x is defined }}{{ y is undefined }}{{ x is not none }}{{ none is iterable }}"
       "{{ u is iterable }}",
       "TrueTrueTrueFalseTrue", R"({"x": 1})"},
      {"{% if m.reasoning is defined and m.reasoning is not none %}y{% else %}n{% endif %}", "n",
       R"({"m": {"reasoning": null}})"},
  });
}

TEST(JinjaExpr, Filters) {
  expect_renders({
      {"{{ [3,1,2]|sort|join(',') }}|{{ ['a','b']|first }}{{ ['a','b']|last }}|"
       "{{ 'Hello'|upper }}|{{ '  x '|trim }}|{{ [{'n':1},{'n':2}]|map(attribute='n')|list }}|"
       "{{ [{'t':'a'},{'t':'b'}]|selectattr('t','equalto','b')|list|length }}|"
       "{{ '42'|int + 1 }}|{{ 'x'|replace('x','y') }}|{{ {'a':1}|items|list }}",
       "1,2,3|ab|HELLO|x|[1, 2]|1|43|y|[('a', 1)]"},
      {"{{ u|default('d') }}{{ ''|default('e', true) }}{{ ''|d('f') }}{{ u|length }}"
       "{{ 'héllo'|length }}{{ ['a', 'b']|map('upper')|join }}",
       "de05AB"},
      {"{{ 'hello wORLD-x'|title }}|{{ 'ab'|capitalize }}|{{ '<a&b>'|e }}|{{ 3.7|int }}|"
       "{{ 'x'|int }}|{{ [1,2,3]|sum }}|{{ [3,1]|max }}|{{ [1,1,2]|unique|list }}|"
       "{{ 'a\\nb'|indent(2) }}|{{ [1,2,3]|reverse|list }}|{{ [1,2,3]|select('odd')|list }}",
       "Hello World-X|Ab|&lt;a&amp;b&gt;|3|0|6|3|[1, 2]|a\n  b|[3, 2, 1]|[1, 3]"},
      {"{% set x %}a{{ 1 }}b{% endset %}{{ x }}|{% filter upper %}abc{% endfilter %}", "a1b|ABC"},
      {"{{ '\\u3000hi\\u00a0 '|trim }}", "hi"},
  });
}

TEST(JinjaMacro, MacrosAndCall) {
  expect_renders({
      {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
       "{{ greet('A') }} {{ greet('B', punct='?') }}",
       "Hi A! Hi B?"},
      {"{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}", "[in]"},
      {"{% macro m(a) %}{{ a }}{{ g }}{% endmacro %}{% set g = 'G' %}{{ m(1) }}", "1G"},
  });
}

TEST(JinjaUndefined, PrintsEmptyButFailsOnUse) {
  EXPECT_EQ(
      render("{{ nope }}|{{ nope is defined }}|{% for x in nope %}x{% endfor %}|{{ d.missing }}|"
             "{{ d['k'] }}|{{ l[5] }}|{{ nope ~ 'x' }}",
             R"({"d": {}, "l": []})"),
      "|False|||||x");
  expect_render_errors({
      {"{{ nope.attr }}", "'nope' is undefined"},
      {"{{ d.missing.x }}", "'dict object' has no attribute 'missing'", R"({"d": {}})"},
      {"{{ l[0].role }}", "list object has no element 0", R"({"l": []})"},
      {"{{ d.missing + 1 }}", "'dict object' has no attribute 'missing'", R"({"d": {}})"},
      {"{{ d.nope|int }}", "'dict object' has no attribute 'nope'", R"({"d": {}})"},
      {"{{ n.startswith('x') }}", "'None' has no attribute 'startswith'", R"({"n": null})"},
  });
}

TEST(JinjaErrors, PythonMessages) {
  expect_render_errors({
      {"{{ none + 'x' }}", "unsupported operand type(s) for +: 'NoneType' and 'str'"},
      {"{{ 'x' + none }}", "can only concatenate str (not \"NoneType\") to str"},
      {"{{ '</think>' in c }}", "argument of type 'NoneType' is not iterable", R"({"c": null})"},
      {"{{ [].append(1) }}", "access to attribute 'append' of 'list' object is unsafe."},
      {"{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'"},
  });
  TemplateError e = render_error("a\n\n{{ raise_exception('bad ' ~ 1) }}");
  EXPECT_EQ(e.message, "bad 1");
  EXPECT_EQ(e.kind, JinjaError::Kind::kRaised);
  EXPECT_EQ(e.line, 3);
}

TEST(JinjaErrors, MoreJinja2Messages) {
  expect_render_errors({
      {"{{ 1 % 0 }}", "integer modulo by zero"},
      {"{{ 1 // 0 }}", "integer division or modulo by zero"},
      {"{% for a, b in [1] %}{% endfor %}", "cannot unpack non-iterable int object"},
      {"{% for a, b in [[1, 2, 3]] %}{% endfor %}", "too many values to unpack (expected 2)"},
      {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
       "macro 'm' takes not more than 1 argument(s)"},
      {"{% macro m(a) %}{% endmacro %}{{ m(b=2) }}", "macro 'm' takes no keyword argument 'b'"},
      {"{% set d.x = 1 %}", "cannot assign attribute on non-namespace object", R"({"d": {}})"},
  });
  expect_renders({
      {"{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}", "(2,){'k': 3}"},
      {"{{ 2.675|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 7|round }}", "2.67 2.0 4.0 7"},
  });
}

TEST(JinjaExpr, PrintfStyleFormatting) {
  expect_renders({
      {"{{ \"%s-%d|%5.2f|%-4s|%x|%r|%%|%03d\" % (\"a\", 3.9, 2.345, \"b\", 255, \"q\", 7) }}",
       "a-3| 2.35|b   |ff|'q'|%|007"},
      {"{{ \"%s and %s\"|format(1, \"b\") }}|{{ '%s' % none }}|{{ '%s' % [1, 2] }}",
       "1 and b|None|[1, 2]"},
  });
  expect_render_errors({
      {"{{ 'x' % 1 }}", "not all arguments converted during string formatting"},
      {"{{ '%s %s' % (1,) }}", "not enough arguments for format string"},
      {"{{ 'a'.find(1) }}", "must be str, not int"},
      {"{{ 'x' is odd }}", "not all arguments converted during string formatting"},
  });
}

TEST(JinjaErrors, HostileInputsFailCleanly) {
  std::string deep = "{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}";
  EXPECT_NE(render_error(deep).message.find("nests deeper"), std::string::npos);
  EXPECT_EQ(render_error("{% set ns = namespace(x=[]) %}{% for i in range(3000) %}"
                         "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}")
                .message,
            "maximum recursion depth exceeded while getting the repr of an object");
  expect_render_errors({
      {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "maximum recursion depth exceeded"},
      {"{{ '%99999999d' % 1 }}", "width too big"},
  });
  EXPECT_EQ(render_error("{{ x.123456789012345678901234 }}").kind, JinjaError::Kind::kUnsupported);
  std::string nested_json = std::string(600, '[') + std::string(600, ']');
  EXPECT_THROW(from_json(nlohmann::ordered_json::parse(nested_json)), JinjaError);
}

TEST(JinjaErrors, CompileErrorsNameConstructAndLine) {
  TemplateError e = render_error("x\n{{ a | nofilter }}");
  EXPECT_EQ(e.message, "No filter named 'nofilter'.");
  EXPECT_EQ(e.line, 2);
  e = render_error("{% if x %}\n{% frobnicate %}{% endif %}");
  EXPECT_EQ(e.line, 2);
  EXPECT_NE(e.message.find("Encountered unknown tag 'frobnicate'"), std::string::npos);
  e = render_error("{% for x in y %}");
  EXPECT_NE(e.message.find("Unexpected end of template"), std::string::npos);
  e = render_error("line1\n{{ 1 + }}");
  EXPECT_EQ(e.line, 2);
  e = render_error("{% include 'x' %}");
  EXPECT_EQ(e.kind, JinjaError::Kind::kUnsupported);
  EXPECT_NE(e.message.find("'include'"), std::string::npos);
  // Inside an `if` (not inside a loop or macro) jinja2 only fails when it gets there.
  EXPECT_EQ(render("{% if false %}{{ x|nofilter }}{{ x is notest }}{% endif %}ok"), "ok");
  EXPECT_EQ(render_error("{% if true %}{{ 1|nofilter }}{% endif %}").message,
            "No filter named 'nofilter' found.");
  EXPECT_EQ(render_error("{% if false %}{% for i in [] %}{{ 1|nofilter }}{% endfor %}{% endif %}")
                .message,
            "No filter named 'nofilter'.");
  e = render_error("{% if x %}{{ x|groupby('a') }}{% endif %}", R"({"x": [1]})");
  EXPECT_EQ(e.kind, JinjaError::Kind::kUnsupported);
  EXPECT_NE(e.message.find("'groupby' is not supported"), std::string::npos);
  e = render_error("{{ x is frob }}");
  EXPECT_EQ(e.message, "No test named 'frob'.");
  auto t = Template::compile("{{ 'unterminated }}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 1"), std::string::npos);
}

// Issue #16 item 6: every render runs within a step and a byte budget. Each of
// these used to hang, run for minutes or grow to gigabytes; now each stops with
// a ResourceExhausted naming the limit (or, for **, answers at once).
TEST(JinjaBudget, HostileTemplatesStopWithABudgetError) {
  auto limited = [](const std::string& src) {
    auto t = Template::compile(src);
    EXPECT_TRUE(t.ok()) << t.status().message();
    if (!t.ok()) return Status(t.status());
    TemplateError err;
    auto out = (*t)->render({}, &err);
    if (out.ok()) return Status(ok_status());
    EXPECT_EQ(err.kind, JinjaError::Kind::kLimit) << src << ": " << out.status().message();
    return out.status();
  };
  const char* step_hogs[] = {
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
      "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}"
      "{{ f(0) }}",
      "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(100000) %}"
      "{% set t = ns.s %}{% endfor %}",
  };
  for (const char* src : step_hogs) {
    Status st = limited(src);
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << src << ": " << st.to_string();
    EXPECT_NE(st.message().find("PAGEDKV_CHAT_TEMPLATE_MAX_"), std::string::npos) << st.message();
  }
  const char* size_hogs[] = {
      "{{ 'a' * 10**10 }}",
      "{{ ([1] * 10**9)|length }}",
      "{{ 'x'.center(10**12) }}",
      "{{ 'x'.ljust(10**12) }}",
      "{{ 'x'.zfill(10**12) }}",
      "{{ 'x\ny'|indent(10**12) }}",
      "{{ [1]|tojson(indent=10**12) }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{{ ns.s|length }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}",
      "{% set ns = namespace(l=[1, 2]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
      "{% endfor %}",
      "{{ ('a' * 1000000).replace('', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb') }}",
      "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
  };
  for (const char* src : size_hogs) {
    Status st = limited(src);
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << src << ": " << st.to_string();
    // (The doubling loops may run out of steps first: both are the budget.)
    EXPECT_NE(st.message().find("PAGEDKV_CHAT_TEMPLATE_MAX_"), std::string::npos)
        << src << ": " << st.message();
  }
  // Exponentiation by squaring: a huge exponent answers at once.
  expect_renders({
      {"{{ 0 ** 9223372036854775807 }}", "0"},
      {"{{ 1 ** 9223372036854775807 }}", "1"},
      {"{{ (-1) ** 9223372036854775807 }}", "-1"},
      {"{{ 3 ** 39 }}", "4052555153018976267"},
      {"{{ 2 ** 62 }}", "4611686018427387904"},
  });
  EXPECT_NE(render("{{ 2 ** 63 }}").find("RENDER ERROR"), std::string::npos);
  EXPECT_NE(render("{{ 2 ** 9223372036854775807 }}").find("RENDER ERROR"), std::string::npos);
}

TEST(JinjaBudget, LimitsAreConfigurableAndNormalTemplatesFitTheDefaults) {
  auto t = Template::compile("{% for i in range(n) %}{{ i }},{% endfor %}");
  ASSERT_TRUE(t.ok());
  std::vector<std::pair<std::string, Value>> vars = {{"n", Value::integer(1000)}};
  RenderLimits small;
  small.max_steps = 100;
  auto out = (*t)->render(vars, nullptr, &small);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(out.status().message().find("more than 100 steps"), std::string::npos);
  RenderLimits tiny_output;
  tiny_output.max_bytes = 100;
  auto three = Template::compile("{{ s }}{{ s }}{{ s }}");
  ASSERT_TRUE(three.ok());
  out = (*three)->render({{"s", Value::string(std::string(60, 'x'))}}, nullptr, &tiny_output);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("the rendered output of 120 bytes"), std::string::npos)
      << out.status().message();
  // The defaults leave plenty of room for a long conversation.
  out = (*t)->render(vars);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->size(), 3890u);
}

}  // namespace
}  // namespace pagedkv::jinja
