// The Jinja syntax tree: expressions and statements as the parser
// (jinja_parser.h) builds them and the renderer (jinja_template.h) walks them.
// Each node keeps its template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/jinja_value.h"

namespace pagedkv::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kConst,     // value
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args = k0, v0, k1, v1, ...
  kGetattr,   // args[0] . name
  kGetitem,   // args[0] [ args[1] ]
  kSlice,     // args[0] [ args[1] : args[2] : args[3] ] (null = omitted)
  kCall,      // args[0] ( args[1..] , kwargs )
  kFilter,    // args[0] | name ( args[1..], kwargs )
  kTest,      // args[0] is name ( args[1..], kwargs )
  kUnary,     // name = "-", "+", "not"; args[0]
  kBinary,    // name = + - * / // % ** ~ ; args[0], args[1]
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kCompare,   // args[0] ops[i] args[i+1] ...
  kCondExpr,  // args[1] if args[0] else args[2] (args[2] null = undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"
  bool unknown_name = false;     // kFilter/kTest: no such filter/test (fails when evaluated)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // conds[i] -> bodies[i]; else_body
  kFor,          // targets in expr [if cond] body else_body
  kSet,          // targets = expr  |  attr_target.attr = expr  |  block set (body, filters)
  kMacro,        // name(params) body
  kCallBlock,    // {% call(params) expr %} body
  kFilterBlock,  // {% filter f %} body
  kWith,         // {% with a = x %} body
  kBreak,
  kContinue,
  kScope,  // a body rendered in place ({% generation %})
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;                // output / for iterable / set value / call expr
  ExprPtr cond;                // for filter
  std::vector<ExprPtr> conds;  // if / elif conditions
  std::vector<Body> bodies;    // if branches
  Body body;
  Body else_body;
  bool has_else = false;
  std::vector<std::string> targets;  // for/set names (several = unpacking)
  bool target_is_tuple = false;
  std::string attr;                                     // set ns.attr: targets[0] = "ns"
  std::string name;                                     // macro name
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro/call params, with defaults
  std::vector<ExprPtr> filters;  // block set / filter block: kFilter chains over null
  std::vector<std::pair<std::string, ExprPtr>> assignments;  // with
};

}  // namespace pagedkv::jinja
