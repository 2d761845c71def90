// Server-sent events framing (text/event-stream): `event: NAME` (optional) and
// `data: ...` lines, one blank line after each event. A data payload with
// newlines becomes several data: lines, as the SSE spec joins them back.
#pragma once

#include <string>
#include <string_view>

namespace pagedkv::server {

// "event: NAME\ndata: DATA\n\n" (no event line when `event` is empty).
std::string sse_event(std::string_view event, std::string_view data);
// "data: DATA\n\n".
inline std::string sse_data(std::string_view data) { return sse_event("", data); }

}  // namespace pagedkv::server
