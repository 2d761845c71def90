// A compiled Jinja template and its renderer: the engine's public face.
//
// Template::compile parses once; render() walks the tree with jinja2's runtime
// rules: for-loops get a fresh scope per iteration (so `set` inside a loop does
// not leak out: that is what namespace() is for), `loop.*` variables, break/
// continue, macros with defaults and caller(), printing with Python's str(),
// and jinja2's default Undefined (prints as "", is falsy and iterates as empty,
// but raises UndefinedError when an attribute is taken, it is called or used
// in arithmetic).
//
// Why hand-written: jinja2 is Python and Debian packages no C++ Jinja library;
// see docs/chat-templates.md for the supported subset.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/jinja_ast.h"
#include "jinja/jinja_budget.h"
#include "pagedkv/status.h"

namespace pagedkv::jinja {

// What went wrong in a failed compile/render.
struct TemplateError {
  JinjaError::Kind kind = JinjaError::Kind::kSyntax;
  std::string message;  // str() of the Python exception jinja2 would raise
  int line = 0;         // template line, 0 when unknown
};

class Template {
 public:
  static StatusOr<std::shared_ptr<const Template>> compile(const std::string& source,
                                                           TemplateError* error = nullptr);

  // Renders with `vars` (name, value) on top of the globals (add_globals).
  // On failure returns a Status whose message names the line, and fills *error.
  // Runs within `limits` (default: RenderLimits::from_env()); a budget that runs
  // out is a ResourceExhausted Status (jinja_budget.h, docs/limits.md).
  StatusOr<std::string> render(const std::vector<std::pair<std::string, Value>>& vars,
                               TemplateError* error = nullptr,
                               const RenderLimits* limits = nullptr) const;

 private:
  Body body_;
};

}  // namespace pagedkv::jinja
