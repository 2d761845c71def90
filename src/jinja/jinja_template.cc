// The Jinja renderer: walks the syntax tree with jinja2's runtime rules (see
// jinja_template.h). Errors are thrown as JinjaError inside this module and turned
// into a Status (plus a TemplateError) at compile()/render().
#include "jinja/jinja_template.h"

#include "jinja/jinja_budget.h"
#include "jinja/jinja_builtins.h"
#include "jinja/jinja_ops.h"
#include "jinja/jinja_parser.h"

namespace pagedkv::jinja {
namespace {

using Frame = std::vector<std::pair<std::string, Value>>;
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

// Whether `name` is read anywhere in a body (jinja2 lets a macro take extra
// arguments only when it refers to varargs/kwargs).
bool uses_name(const Expr* e, const std::string& name) {
  if (e == nullptr) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  for (const ExprPtr& a : e->args) {
    if (uses_name(a.get(), name)) return true;
  }
  for (const auto& kv : e->kwargs) {
    if (uses_name(kv.second.get(), name)) return true;
  }
  return false;
}

bool uses_name(const Body& body, const std::string& name) {
  for (const StmtPtr& s : body) {
    if (uses_name(s->expr.get(), name) || uses_name(s->cond.get(), name)) return true;
    for (const ExprPtr& c : s->conds) {
      if (uses_name(c.get(), name)) return true;
    }
    for (const Body& b : s->bodies) {
      if (uses_name(b, name)) return true;
    }
    if (uses_name(s->body, name) || uses_name(s->else_body, name)) return true;
    for (const auto& p : s->params) {
      if (uses_name(p.second.get(), name)) return true;
    }
    for (const ExprPtr& f : s->filters) {
      if (uses_name(f.get(), name)) return true;
    }
    for (const auto& a : s->assignments) {
      if (uses_name(a.second.get(), name)) return true;
    }
  }
  return false;
}

// Recursion guard for macros calling themselves.
constexpr int kMaxCallDepth = 200;

class Renderer {
 public:
  explicit Renderer(const std::vector<std::pair<std::string, Value>>& vars) {
    auto root = std::make_shared<Frame>();
    add_globals(*root);
    for (const auto& [k, v] : vars) set_in(*root, k, v);
    frames_.push_back(root);
  }

  int line() const { return line_; }

  Flow exec(const Body& body, std::string& out) {
    for (const StmtPtr& s : body) {
      Flow f = exec_stmt(*s, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  static void set_in(Frame& f, const std::string& name, Value v) {
    for (auto& [k, val] : f) {
      if (k == name) {
        val = std::move(v);
        return;
      }
    }
    f.emplace_back(name, std::move(v));
  }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      for (const auto& [k, v] : **it) {
        if (k == name) return v;
      }
    }
    return Value::undefined(py_repr_string(name) + " is undefined");
  }

  void assign(const std::string& name, Value v) { set_in(*frames_.back(), name, std::move(v)); }

  void bind_targets(const Stmt& s, const Value& v, Frame& frame) {
    if (!s.target_is_tuple) {
      set_in(frame, s.targets[0], v);
      return;
    }
    if (!v.is_string() && !v.is_sequence_like() && !v.is_dict() && !v.is_undefined()) {
      throw_type_error("cannot unpack non-iterable " + type_name(v) + " object");
    }
    std::vector<Value> items = iterate(v);
    if (items.size() < s.targets.size()) {
      throw JinjaError(JinjaError::Kind::kValue, "not enough values to unpack (expected " +
                                                     std::to_string(s.targets.size()) + ", got " +
                                                     std::to_string(items.size()) + ")");
    }
    if (items.size() > s.targets.size()) {
      throw JinjaError(JinjaError::Kind::kValue, "too many values to unpack (expected " +
                                                     std::to_string(s.targets.size()) + ")");
    }
    for (size_t i = 0; i < items.size(); ++i) set_in(frame, s.targets[i], items[i]);
  }

  struct ScopedFrames {
    Renderer* r;
    std::vector<FramePtr> saved;
    ScopedFrames(Renderer* r_, std::vector<FramePtr> frames)
        : r(r_), saved(std::move(r_->frames_)) {
      r->frames_ = std::move(frames);
    }
    ~ScopedFrames() { r->frames_ = std::move(saved); }
  };

  struct PushFrame {
    Renderer* r;
    explicit PushFrame(Renderer* r_, FramePtr f = std::make_shared<Frame>()) : r(r_) {
      r->frames_.push_back(std::move(f));
    }
    ~PushFrame() { r->frames_.pop_back(); }
  };

  // Appends rendered text, within the output budget (jinja_budget.h).
  static void emit(std::string& out, const std::string& text) {
    RenderBudget::check_bytes(out.size() + text.size(), "the rendered output");
    RenderBudget::charge_bytes(text.size());
    out += text;
  }

  Flow exec_stmt(const Stmt& s, std::string& out) {
    line_ = s.line;
    RenderBudget::charge(1);
    switch (s.kind) {
      case StmtKind::kText:
        emit(out, s.text);
        return Flow::kNormal;
      case StmtKind::kOutput:
        emit(out, py_str(eval(*s.expr)));
        return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i) {
          if (truthy(eval(*s.conds[i]))) return exec(s.bodies[i], out);
        }
        if (s.has_else) return exec(s.else_body, out);
        return Flow::kNormal;
      case StmtKind::kFor:
        return exec_for(s, out);
      case StmtKind::kSet:
        exec_set(s);
        return Flow::kNormal;
      case StmtKind::kMacro:
        assign(s.name, make_macro(s, s.name));
        return Flow::kNormal;
      case StmtKind::kCallBlock: {
        Value caller = make_macro(s, "caller");
        const Expr& call = *s.expr;
        Value callee = eval(*call.args[0]);
        CallArgs args = eval_args(call, 1);
        args.keyword.emplace_back("caller", caller);
        emit(out, py_str(invoke(callee, args)));
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        std::string inner;
        {
          PushFrame pf(this);
          exec(s.body, inner);
        }
        emit(out, py_str(apply_filters(s.filters, Value::string(inner))));
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        auto frame = std::make_shared<Frame>();
        for (const auto& [n, e] : s.assignments) set_in(*frame, n, eval(*e));
        PushFrame pf(this, frame);
        return exec(s.body, out);
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope:
        return exec(s.body, out);
    }
    return Flow::kNormal;
  }

  Value apply_filters(const std::vector<ExprPtr>& filters, Value v) {
    for (const ExprPtr& f : filters) {
      line_ = f->line;
      if (f->unknown_name) {
        throw JinjaError(JinjaError::Kind::kSyntax, "No filter named '" + f->name + "' found.");
      }
      CallArgs args = eval_args(*f, 1);
      v = apply_filter(f->name, v, args);
    }
    return v;
  }

  void exec_set(const Stmt& s) {
    Value v;
    if (s.expr) {
      v = eval(*s.expr);
    } else {
      std::string inner;
      {
        PushFrame pf(this);
        exec(s.body, inner);
      }
      v = apply_filters(s.filters, Value::string(inner));
    }
    if (!s.attr.empty()) {
      Value ns = lookup(s.targets[0]);
      if (!ns.is_object() || ns.as_object().type_name != "Namespace") {
        throw JinjaError(JinjaError::Kind::kType,
                         "cannot assign attribute on non-namespace object");
      }
      ns.as_object().set(s.attr, v);
      return;
    }
    bind_targets(s, v, *frames_.back());
  }

  Flow exec_for(const Stmt& s, std::string& out) {
    Value iterable = eval(*s.expr);
    std::vector<Value> items = iterate(iterable);
    if (s.cond) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        auto frame = std::make_shared<Frame>();
        bind_targets(s, item, *frame);
        PushFrame pf(this, frame);
        if (truthy(eval(*s.cond))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (s.has_else) {
        PushFrame pf(this);
        return exec(s.else_body, out);
      }
      return Flow::kNormal;
    }
    int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      RenderBudget::charge(1);  // an empty body still costs a step per iteration
      auto frame = std::make_shared<Frame>();
      auto loop = std::make_shared<Object>();
      loop->type_name = "LoopContext";
      loop->module_name = "jinja2.runtime";
      loop->attrs = {{"index0", Value::integer(i)},
                     {"index", Value::integer(i + 1)},
                     {"revindex0", Value::integer(n - i - 1)},
                     {"revindex", Value::integer(n - i)},
                     {"first", Value::boolean(i == 0)},
                     {"last", Value::boolean(i == n - 1)},
                     {"length", Value::integer(n)},
                     {"depth", Value::integer(1)},
                     {"depth0", Value::integer(0)},
                     {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                                        : Value::undefined("there is no previous item")},
                     {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                            : Value::undefined("there is no next item")},
                     {"cycle", Value::callable("loop.cycle", [i](CallArgs& a) -> Value {
                        if (a.positional.empty()) {
                          throw JinjaError(JinjaError::Kind::kType, "no items for cycling given");
                        }
                        return a.positional[static_cast<size_t>(i) % a.positional.size()];
                      })}};
      set_in(*frame, "loop", Value::object(loop));
      bind_targets(s, items[static_cast<size_t>(i)], *frame);
      PushFrame pf(this, frame);
      Flow f = exec(s.body, out);
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value make_macro(const Stmt& s, const std::string& name) {
    std::vector<std::weak_ptr<Frame>> captured(frames_.begin(), frames_.end());
    const Stmt* def = &s;
    return Value::callable(name, [this, def, captured, name](CallArgs& a) -> Value {
      if (++depth_ > kMaxCallDepth) {
        throw JinjaError(JinjaError::Kind::kValue, "maximum recursion depth exceeded");
      }
      std::vector<FramePtr> frames;
      for (const auto& w : captured) {
        if (auto f = w.lock()) frames.push_back(f);
      }
      auto frame = std::make_shared<Frame>();
      frames.push_back(frame);
      ScopedFrames scope(this, std::move(frames));
      size_t np = def->params.size();
      for (size_t i = 0; i < np; ++i) {
        const auto& [pname, pdef] = def->params[i];
        std::optional<Value> v;
        if (i < a.positional.size()) {
          v = a.positional[i];
        } else {
          for (const auto& [k, kv] : a.keyword) {
            if (k == pname) v = kv;
          }
        }
        if (!v) {
          v = pdef ? eval(*pdef)
                   : Value::undefined("parameter " + py_repr_string(pname) + " was not provided");
        }
        set_in(*frame, pname, *v);
      }
      if (a.positional.size() > np && !uses_name(def->body, "varargs")) {
        throw JinjaError(JinjaError::Kind::kType, "macro " + py_repr_string(name) +
                                                      " takes not more than " + std::to_string(np) +
                                                      " argument(s)");
      }
      List varargs;
      for (size_t i = np; i < a.positional.size(); ++i) varargs.push_back(a.positional[i]);
      Dict kwargs;
      for (const auto& [k, kv] : a.keyword) {
        bool is_param = false;
        for (const auto& p : def->params) is_param = is_param || p.first == k;
        if (k == "caller") {
          set_in(*frame, "caller", kv);
        } else if (!is_param) {
          if (!uses_name(def->body, "kwargs")) {
            throw JinjaError(JinjaError::Kind::kType, "macro " + py_repr_string(name) +
                                                          " takes no keyword argument " +
                                                          py_repr_string(k));
          }
          kwargs.set(Value::string(k), kv);
        }
      }
      set_in(*frame, "varargs", Value::tuple(std::move(varargs)));
      set_in(*frame, "kwargs", Value::dict(std::move(kwargs)));
      std::string out;
      exec(def->body, out);
      --depth_;
      return Value::string(out);
    });
  }

  Value invoke(const Value& callee, CallArgs& args) {
    if (callee.is_undefined()) fail_undefined(callee);
    if (!callee.is_callable()) {
      throw_type_error(py_repr_string(type_name(callee)) + " object is not callable");
    }
    return callee.as_callable().fn(args);
  }

  CallArgs eval_args(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
    return args;
  }

  Value eval(const Expr& e) {
    line_ = e.line;
    RenderBudget::charge(1);
    switch (e.kind) {
      case ExprKind::kConst:
        return e.value;
      case ExprKind::kName:
        return lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        for (const ExprPtr& a : e.args) items.push_back(eval(*a));
        return e.kind == ExprKind::kList ? Value::list(std::move(items))
                                         : Value::tuple(std::move(items));
      }
      case ExprKind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i]);
          if (k.is_list() || k.is_dict())
            throw_type_error("unhashable type: '" + type_name(k) + "'");
          d.set(k, eval(*e.args[i + 1]));
        }
        return Value::dict(std::move(d));
      }
      case ExprKind::kGetattr:
        return get_attr(eval(*e.args[0]), e.name);
      case ExprKind::kGetitem: {
        Value obj = eval(*e.args[0]);
        return get_item(obj, eval(*e.args[1]));
      }
      case ExprKind::kSlice: {
        Value obj = eval(*e.args[0]);
        auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : Value::none(); };
        Value a = part(1), b = part(2), c = part(3);
        return slice_value(obj, a, b, c);
      }
      case ExprKind::kCall: {
        Value callee = eval(*e.args[0]);
        CallArgs args = eval_args(e, 1);
        line_ = e.line;
        return invoke(callee, args);
      }
      case ExprKind::kFilter: {
        if (e.unknown_name) {
          throw JinjaError(JinjaError::Kind::kSyntax, "No filter named '" + e.name + "' found.");
        }
        Value input = eval(*e.args[0]);
        CallArgs args = eval_args(e, 1);
        line_ = e.line;
        return apply_filter(e.name, input, args);
      }
      case ExprKind::kTest: {
        if (e.unknown_name) {
          throw JinjaError(JinjaError::Kind::kSyntax, "No test named '" + e.name + "' found.");
        }
        Value input = eval(*e.args[0]);
        CallArgs args = eval_args(e, 1);
        line_ = e.line;
        return Value::boolean(apply_test(e.name, input, args));
      }
      case ExprKind::kUnary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        return unary_minus(v, e.name == "-");
      }
      case ExprKind::kBinary: {
        Value a = eval(*e.args[0]);
        Value b = eval(*e.args[1]);
        line_ = e.line;
        return binary_op(e.name, a, b);
      }
      case ExprKind::kAnd: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case ExprKind::kOr: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          line_ = e.line;
          if (!compare_op(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCondExpr:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        if (e.args[2]) return eval(*e.args[2]);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
    }
    return Value();
  }

  std::vector<FramePtr> frames_;
  int line_ = 0;
  int depth_ = 0;
};

const char* kind_label(JinjaError::Kind k) {
  switch (k) {
    case JinjaError::Kind::kSyntax:
      return "syntax error";
    case JinjaError::Kind::kUndefined:
      return "undefined value";
    case JinjaError::Kind::kType:
      return "type error";
    case JinjaError::Kind::kRaised:
      return "template raised an exception";
    case JinjaError::Kind::kUnsupported:
      return "unsupported construct";
    case JinjaError::Kind::kSecurity:
      return "sandbox violation";
    case JinjaError::Kind::kValue:
      return "value error";
    case JinjaError::Kind::kLimit:
      return "render budget exceeded";
  }
  return "error";
}

Status to_status(const JinjaError& e, TemplateError* out) {
  if (out != nullptr) {
    out->kind = e.kind();
    out->message = e.message();
    out->line = e.line();
  }
  std::string msg = std::string("jinja template ") + kind_label(e.kind()) + " at line " +
                    std::to_string(e.line()) + ": " + e.message();
  if (e.kind() == JinjaError::Kind::kLimit) return resource_exhausted(msg);
  return invalid_argument(msg);
}

}  // namespace

StatusOr<std::shared_ptr<const Template>> Template::compile(const std::string& source,
                                                            TemplateError* error) {
  try {
    auto t = std::shared_ptr<Template>(new Template());
    t->body_ = parse_template(source);
    return std::shared_ptr<const Template>(std::move(t));
  } catch (const JinjaError& e) {
    return to_status(e, error);
  } catch (const std::exception& e) {  // e.g. std::out_of_range from a huge literal
    return to_status(JinjaError(JinjaError::Kind::kValue, e.what()), error);
  }
}

StatusOr<std::string> Template::render(const std::vector<std::pair<std::string, Value>>& vars,
                                       TemplateError* error, const RenderLimits* limits) const {
  Renderer r(vars);
  RenderBudget budget(limits != nullptr ? *limits : RenderLimits::from_env());
  try {
    std::string out;
    r.exec(body_, out);
    return out;
  } catch (JinjaError& e) {
    e.set_line_if_unknown(r.line());
    return to_status(e, error);
  } catch (const std::bad_alloc&) {
    return to_status(JinjaError(JinjaError::Kind::kLimit, "out of memory", r.line()), error);
  } catch (const std::exception& e) {
    return to_status(JinjaError(JinjaError::Kind::kValue, e.what(), r.line()), error);
  }
}

}  // namespace pagedkv::jinja
