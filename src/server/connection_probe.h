// ConnectionProbe: tells a request handler whether its client has gone away.
// cpp-httplib 0.11 (Debian 12) gives a handler no access to its socket and
// only notices a closed connection when a write fails, which a request waiting
// in the queue or in a long prefill never does. So the handler finds its
// connection's descriptor once — the socket whose local and peer addresses are
// the request's (a TCP connection's 4-tuple is unique, and the worker thread
// keeps the socket open until the handler returns) — and then polls it for a
// hang-up (POLLRDHUP / a zero-byte peek) while it waits on the engine.
#pragma once

#include <string>

namespace pagedkv::server {

class ConnectionProbe {
 public:
  // -1 (never reports "gone") when no matching socket is found.
  ConnectionProbe(const std::string& local_addr, int local_port, const std::string& remote_addr,
                  int remote_port);
  explicit ConnectionProbe(int fd) : fd_(fd) {}
  // True once the peer closed or reset the connection.
  bool peer_gone() const;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace pagedkv::server
