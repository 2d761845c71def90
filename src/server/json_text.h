// How the server writes JSON: compact (no indentation), and a string holding
// invalid UTF-8 (a model can emit any bytes, a client can send them) written
// with U+FFFD in place of the bad bytes instead of throwing. Every response
// body and every JSON handed on as text goes through dump_json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pagedkv::server {

template <typename JsonT>
std::string dump_json(const JsonT& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace pagedkv::server
