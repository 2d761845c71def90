// SSE framing (sse.h).
#include "server/sse.h"

namespace pagedkv::server {

std::string sse_event(std::string_view event, std::string_view data) {
  std::string out;
  out.reserve(data.size() + event.size() + 16);
  if (!event.empty()) {
    out += "event: ";
    out += event;
    out += "\n";
  }
  size_t pos = 0;
  while (true) {
    size_t nl = data.find('\n', pos);
    out += "data: ";
    out += data.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    out += "\n";
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  out += "\n";
  return out;
}

}  // namespace pagedkv::server
