// The Jinja parser (see jinja_parser.h): a recursive-descent transcription of
// jinja2 3.1's parser.py for the constructs chat templates use.
#include "jinja/jinja_parser.h"

#include <set>

#include "jinja/jinja_lexer.h"

namespace pagedkv::jinja {
namespace {

const std::set<std::string>& known_filters() {
  static const std::set<std::string> k = {
      "abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
      "first", "float", "forceescape", "indent", "int", "items", "join", "last", "length", "list",
      "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round", "safe",
      "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper",
      "wordcount", "batch",
      // jinja2 built-ins without an implementation here: accepted when parsing,
      // an "unsupported" error when a render reaches them.
      "format", "filesizeformat", "groupby", "pprint", "random", "slice", "striptags", "truncate",
      "urlencode", "urlize", "wordwrap", "xmlattr"};
  return k;
}

const std::set<std::string>& known_tests() {
  static const std::set<std::string> k = {
      "boolean", "callable", "defined",  "divisibleby", "eq",       "equalto",     "escaped",
      "even",    "false",    "filter",   "float",       "ge",       "greaterthan", "gt",
      "in",      "integer",  "iterable", "le",          "lessthan", "lower",       "lt",
      "mapping", "ne",       "none",     "number",      "odd",      "sameas",      "sequence",
      "string",  "test",     "true",     "undefined",   "upper",    "==",          "!=",
      "<",       "<=",       ">",        ">="};
  return k;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_all() {
    std::string found;
    Body body = subparse({}, &found, "");
    return body;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& look(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const {
    return cur().type == TokenType::kOperator && cur().value == op;
  }
  bool is_name(const char* n) const { return cur().type == TokenType::kName && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kText:
        return "template data";
      case TokenType::kVarBegin:
        return "begin of print statement";
      case TokenType::kVarEnd:
        return "end of print statement";
      case TokenType::kBlockBegin:
        return "begin of statement block";
      case TokenType::kBlockEnd:
        return "end of statement block";
      case TokenType::kEnd:
        return "end of template";
      case TokenType::kString:
        return "string";
      case TokenType::kInteger:
        return "integer";
      case TokenType::kFloat:
        return "float";
      default:
        return t.value;
    }
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw JinjaError(JinjaError::Kind::kSyntax, message, cur().line);
  }
  [[noreturn]] void fail_unsupported(const std::string& message) const {
    throw JinjaError(JinjaError::Kind::kUnsupported, message, cur().line);
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) {
      fail(std::string("expected token '") + op + "', got '" + describe(cur()) + "'");
    }
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) {
      fail("expected token 'name', got '" + describe(cur()) + "'");
    }
    std::string v = cur().value;
    next();
    return v;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) {
      fail("expected token 'end of statement block', got '" + describe(cur()) + "'");
    }
    next();
  }

  static std::string join_names(const std::set<std::string>& names) {
    std::string out;
    for (const auto& n : names) {
      if (!out.empty()) out += " or ";
      out += "'" + n + "'";
    }
    return out;
  }

  // Parses statements until a block tag named in `ends`; leaves the stream just
  // after that tag's name and stores the name in *found.
  Body subparse(const std::set<std::string>& ends, std::string* found, const std::string& inner) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::kVarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = t.line;
        s->expr = parse_tuple(false, true, {}, false);
        if (cur().type != TokenType::kVarEnd) {
          fail("expected token 'end of print statement', got '" + describe(cur()) + "'");
        }
        next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        next();
        if (cur().type != TokenType::kName) fail("tag name expected");
        if (ends.count(cur().value)) {
          *found = cur().value;
          next();
          return body;
        }
        body.push_back(parse_statement(ends, inner));
        expect_block_end();
      } else if (t.type == TokenType::kEnd) {
        if (!ends.empty()) {
          fail("Unexpected end of template. Jinja was looking for the following tags: " +
               join_names(ends) + ". The innermost block that needs to be closed is '" + inner +
               "'.");
        }
        return body;
      } else {
        fail("unexpected '" + describe(t) + "'");
      }
    }
  }

  // After a statement's header: expects `%}` and parses the body.
  Body parse_statements(const std::set<std::string>& ends, std::string* found,
                        const std::string& inner) {
    expect_block_end();
    return subparse(ends, found, inner);
  }

  // jinja2 checks filter/test names at compile time except in an `if` ("soft")
  // frame, where an unknown name fails only when evaluated; loops, macros and
  // other blocks open a new (hard) frame.
  struct SoftScope {
    Parser* p;
    bool saved;
    SoftScope(Parser* p_, bool soft) : p(p_), saved(p_->soft_) { p->soft_ = soft; }
    ~SoftScope() { p->soft_ = saved; }
  };

  Body parse_inner(const std::set<std::string>& ends, std::string* found,
                   const std::string& inner) {
    SoftScope hard(this, false);
    return parse_statements(ends, found, inner);
  }

  StmtPtr parse_statement(const std::set<std::string>& outer_ends, const std::string& outer) {
    std::string tag = cur().value;
    int line = cur().line;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    std::string found;
    if (tag == "if") {
      next();
      s->kind = StmtKind::kIf;
      SoftScope soft(this, true);
      while (true) {
        s->conds.push_back(parse_tuple(false, false, {}, false));
        s->bodies.push_back(parse_statements({"elif", "else", "endif"}, &found, "if"));
        if (found == "elif") continue;
        if (found == "else") {
          s->has_else = true;
          s->else_body = parse_statements({"endif"}, &found, "if");
        }
        break;
      }
    } else if (tag == "for") {
      next();
      s->kind = StmtKind::kFor;
      parse_targets(s.get(), "in");
      if (!skip_name("in")) fail("expected token 'in', got '" + describe(cur()) + "'");
      s->expr = parse_tuple(false, false, {"recursive"}, false);
      if (skip_name("if")) s->cond = parse_expression(true);
      if (is_name("recursive")) fail_unsupported("recursive for loops are not supported");
      s->body = parse_inner({"endfor", "else"}, &found, "for");
      if (found == "else") {
        s->has_else = true;
        s->else_body = parse_inner({"endfor"}, &found, "for");
      }
    } else if (tag == "set") {
      next();
      s->kind = StmtKind::kSet;
      if (cur().type == TokenType::kName && look().type == TokenType::kOperator &&
          look().value == ".") {
        s->targets.push_back(cur().value);
        next();
        next();
        s->attr = expect_name();
      } else {
        parse_targets(s.get(), "=");
      }
      if (skip_op("=")) {
        s->expr = parse_tuple(false, true, {}, false);
      } else {
        while (is_op("|")) s->filters.push_back(parse_filter(nullptr));
        s->body = parse_inner({"endset"}, &found, "set");
      }
    } else if (tag == "macro") {
      next();
      s->kind = StmtKind::kMacro;
      s->name = expect_name();
      parse_signature(s.get());
      s->body = parse_inner({"endmacro"}, &found, "macro");
    } else if (tag == "call") {
      next();
      s->kind = StmtKind::kCallBlock;
      if (is_op("(")) parse_signature(s.get());
      s->expr = parse_expression(true);
      if (s->expr->kind != ExprKind::kCall) fail("expected call");
      s->body = parse_inner({"endcall"}, &found, "call");
    } else if (tag == "filter") {
      next();
      s->kind = StmtKind::kFilterBlock;
      s->filters.push_back(parse_filter(nullptr, /*start_inline=*/true));
      while (is_op("|")) s->filters.push_back(parse_filter(nullptr));
      s->body = parse_inner({"endfilter"}, &found, "filter");
    } else if (tag == "with") {
      next();
      s->kind = StmtKind::kWith;
      while (cur().type != TokenType::kBlockEnd) {
        if (!s->assignments.empty()) expect_op(",");
        std::string n = expect_name();
        expect_op("=");
        s->assignments.emplace_back(n, parse_expression(true));
      }
      s->body = parse_inner({"endwith"}, &found, "with");
    } else if (tag == "break" || tag == "continue") {
      next();
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    } else if (tag == "generation") {
      // transformers' AssistantTracker extension: renders its body in place.
      next();
      s->kind = StmtKind::kScope;
      s->body = parse_statements({"endgeneration"}, &found, "generation");
    } else if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" ||
               tag == "block" || tag == "autoescape" || tag == "do" || tag == "raw") {
      fail_unsupported("the '" + tag + "' tag is not supported by pagedkv's chat-template engine");
    } else {
      std::string msg = "Encountered unknown tag '" + tag + "'.";
      if (!outer_ends.empty()) {
        msg += " Jinja was looking for the following tags: " + join_names(outer_ends) +
               ". The innermost block that needs to be closed is '" + outer + "'.";
      }
      fail(msg);
    }
    return s;
  }

  // for/set targets: a name or a (possibly parenthesized) tuple of names.
  void parse_targets(Stmt* s, const char* end_word) {
    bool paren = skip_op("(");
    while (true) {
      if (cur().type != TokenType::kName) fail("can't assign to " + describe(cur()));
      s->targets.push_back(cur().value);
      next();
      if (!is_op(",")) break;
      s->target_is_tuple = true;
      next();
      if (paren && is_op(")")) break;
      if (!paren && (is_name(end_word) || is_op(end_word))) break;
    }
    if (paren) {
      expect_op(")");
      s->target_is_tuple = true;
    }
  }

  void parse_signature(Stmt* s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      std::string n = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression(true);
      s->params.emplace_back(n, std::move(def));
    }
    expect_op(")");
  }

  ExprPtr make(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  bool is_tuple_end(const std::set<std::string>& extra) const {
    if (cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd ||
        cur().type == TokenType::kEnd || is_op(")")) {
      return true;
    }
    return cur().type == TokenType::kName && extra.count(cur().value) > 0;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::set<std::string>& extra,
                      bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      if (simplified) {
        args.push_back(parse_primary());
      } else {
        args.push_back(parse_expression(with_condexpr));
      }
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail("Expected an expression, got '" + describe(cur()) + "'");
    }
    auto t = make(ExprKind::kTuple, line);
    t->args = std::move(args);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr1 = parse_or();
    while (is_name("if")) {
      int line = cur().line;
      next();
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      auto c = make(ExprKind::kCondExpr, line);
      c->args.push_back(std::move(expr2));
      c->args.push_back(std::move(expr1));
      c->args.push_back(std::move(expr3));
      expr1 = std::move(c);
    }
    return expr1;
  }

  ExprPtr binary(ExprKind k, const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = make(k, line);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      next();
      left = binary(ExprKind::kOr, "or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      next();
      left = binary(ExprKind::kAnd, "and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      int line = cur().line;
      next();
      auto e = make(ExprKind::kUnary, line);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr expr = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOperator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
           cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && look().type == TokenType::kName && look().value == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, line);
        cmp->args.push_back(std::move(expr));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().value;
      int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, "~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().value;
      int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, "**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  // Bounds the parser's recursion so a hostile template cannot exhaust the stack.
  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* p_) : p(p_) {
      if (++p->depth_ > kMaxNesting) p->fail("template nests deeper than 200 levels");
    }
    ~DepthGuard() { --p->depth_; }
  };
  static constexpr int kMaxNesting = 200;

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make(ExprKind::kUnary, cur().line);
      e->name = cur().value;
      next();
      e->args.push_back(parse_unary(false));
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    int line = t.line;
    if (t.type == TokenType::kName) {
      auto e = make(ExprKind::kConst, line);
      if (t.value == "true" || t.value == "True") {
        e->value = Value::boolean(true);
      } else if (t.value == "false" || t.value == "False") {
        e->value = Value::boolean(false);
      } else if (t.value == "none" || t.value == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.value;
      }
      next();
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s = t.value;
      next();
      while (cur().type == TokenType::kString) {
        s += cur().value;
        next();
      }
      auto e = make(ExprKind::kConst, line);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInteger) {
      auto e = make(ExprKind::kConst, line);
      std::string v = t.value;
      int base = 10;
      if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) base = 16;
      if (v.size() > 2 && v[0] == '0' && (v[1] == 'o' || v[1] == 'O')) base = 8;
      if (v.size() > 2 && v[0] == '0' && (v[1] == 'b' || v[1] == 'B')) base = 2;
      try {
        e->value = Value::integer(std::stoll(base == 10 ? v : v.substr(2), nullptr, base));
      } catch (const std::exception&) {
        fail_unsupported("integer literal " + v + " is out of range");
      }
      next();
      return e;
    }
    if (t.type == TokenType::kFloat) {
      auto e = make(ExprKind::kConst, line);
      e->value = Value::number(std::stod(t.value));
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make(ExprKind::kList, line);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = make(ExprKind::kDict, line);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail("unexpected '" + describe(t) + "'");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == TokenType::kName) {
        auto e = make(ExprKind::kGetattr, line);
        e->name = cur().value;
        e->args.push_back(std::move(node));
        next();
        return e;
      }
      if (cur().type == TokenType::kInteger) {
        auto e = make(ExprKind::kGetitem, line);
        e->args.push_back(std::move(node));
        auto k = make(ExprKind::kConst, line);
        try {
          k->value = Value::integer(std::stoll(cur().value));
        } catch (const std::exception&) {
          fail_unsupported("integer literal " + cur().value + " is out of range");
        }
        e->args.push_back(std::move(k));
        next();
        return e;
      }
      fail("expected name or number");
    }
    expect_op("[");
    std::vector<ExprPtr> subs;
    while (!is_op("]")) {
      if (!subs.empty()) expect_op(",");
      subs.push_back(parse_subscribed());
    }
    expect_op("]");
    if (subs.size() == 1 && subs[0]->kind == ExprKind::kSlice) {
      subs[0]->args[0] = std::move(node);
      return std::move(subs[0]);
    }
    auto e = make(ExprKind::kGetitem, line);
    e->args.push_back(std::move(node));
    if (subs.size() == 1) {
      e->args.push_back(std::move(subs[0]));
    } else {
      for (const auto& sub : subs) {
        if (sub->kind == ExprKind::kSlice) fail_unsupported("multi-dimensional slices");
      }
      auto t = make(ExprKind::kTuple, line);
      t->args = std::move(subs);
      e->args.push_back(std::move(t));
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    std::vector<ExprPtr> args;
    if (is_op(":")) {
      next();
      args.push_back(nullptr);
    } else {
      ExprPtr node = parse_expression(true);
      if (!is_op(":")) return node;
      next();
      args.push_back(std::move(node));
    }
    if (is_op(":")) {
      args.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      args.push_back(parse_expression(true));
    } else {
      args.push_back(nullptr);
    }
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) {
        args.push_back(parse_expression(true));
      } else {
        args.push_back(nullptr);
      }
    } else {
      args.push_back(nullptr);
    }
    auto s = make(ExprKind::kSlice, line);
    s->args.push_back(nullptr);  // the sliced object, filled in by the caller
    for (auto& a : args) s->args.push_back(std::move(a));
    return s;
  }

  void parse_call_args(Expr* e) {
    expect_op("(");
    while (!is_op(")")) {
      if (e->args.size() > 1 || !e->kwargs.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail_unsupported("*args/**kwargs in calls are not supported");
      if (cur().type == TokenType::kName && look().type == TokenType::kOperator &&
          look().value == "=") {
        std::string key = cur().value;
        next();
        next();
        e->kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e->kwargs.empty()) fail("invalid syntax for function call expression");
        e->args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::kCall, cur().line);
    e->args.push_back(std::move(node));
    parse_call_args(e.get());
    return e;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline = false) {
    int line = cur().line;
    if (!start_inline) expect_op("|");
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    bool unknown = !is_known_filter(name);
    if (unknown && !soft_) {
      throw JinjaError(JinjaError::Kind::kSyntax, "No filter named '" + name + "'.", line);
    }
    auto e = make(ExprKind::kFilter, line);
    e->unknown_name = unknown;
    e->name = name;
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(e.get());
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
    int line = cur().line;
    next();  // 'is'
    bool negated = skip_name("not");
    std::string name;
    if (cur().type == TokenType::kName) {
      name = expect_name();
    } else if (cur().type == TokenType::kOperator &&
               (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
      fail("expected token 'name', got '" + cur().value + "'");
    } else {
      fail("expected token 'name', got '" + describe(cur()) + "'");
    }
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    bool unknown = !is_known_test(name);
    if (unknown && !soft_) {
      throw JinjaError(JinjaError::Kind::kSyntax, "No test named '" + name + "'.", line);
    }
    auto e = make(ExprKind::kTest, line);
    e->unknown_name = unknown;
    e->name = name;
    e->args.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(e.get());
    } else if ((cur().type == TokenType::kName || cur().type == TokenType::kString ||
                cur().type == TokenType::kInteger || cur().type == TokenType::kFloat ||
                is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    if (negated) {
      auto n = make(ExprKind::kUnary, line);
      n->name = "not";
      n->args.push_back(std::move(e));
      return n;
    }
    return e;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  bool soft_ = false;
  int depth_ = 0;
};

}  // namespace

bool is_known_filter(const std::string& name) { return known_filters().count(name) > 0; }
bool is_known_test(const std::string& name) { return known_tests().count(name) > 0; }

Body parse_template(const std::string& source) { return Parser(tokenize(source)).parse_all(); }

}  // namespace pagedkv::jinja
