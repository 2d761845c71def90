// The dashboard: ONE self-contained HTML page (inline CSS and JavaScript, no
// CDN, no build step) embedded in the binary and served at GET /. It polls
// GET /v1/stats every second (pool occupancy, hit rate, cold tier, running and
// waiting requests, recent requests with their cached tokens) and has a small
// chat box that streams from POST /v1/chat/completions. Element ids the
// browser test relies on are listed in docs/server.md ("Dashboard").
#pragma once

#include <string_view>

namespace pagedkv::server {

std::string_view dashboard_html();

}  // namespace pagedkv::server
