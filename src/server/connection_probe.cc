// ConnectionProbe (connection_probe.h).
#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace pagedkv::server {
namespace {

// numeric host and port of a socket address, as cpp-httplib formats them.
bool describe(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char buf[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, buf, sizeof(buf), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return false;
  *host = buf;
  if (addr.ss_family == AF_INET)
    *port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  else if (addr.ss_family == AF_INET6)
    *port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  else
    return false;
  return true;
}

bool matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr,
             int remote_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  std::string host;
  int port = -1;
  if (!describe(a, len, &host, &port) || port != remote_port || host != remote_addr) return false;
  len = sizeof(a);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  return describe(a, len, &host, &port) && port == local_port && host == local_addr;
}

}  // namespace

ConnectionProbe::ConnectionProbe(const std::string& local_addr, int local_port,
                                 const std::string& remote_addr, int remote_port) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = std::atoi(e->d_name);
    if (fd == dirfd(d)) continue;
    // Sockets only, told by the /proc link ("socket:[inode]"), not by fstat(fd):
    // every other descriptor belongs to another thread, which may close it at
    // any moment (ThreadSanitizer reported fstat racing httplib's close() of the
    // listening socket at shutdown). getpeername/getsockname on a descriptor
    // closed meanwhile fail, and one reused meanwhile cannot have this 4-tuple.
    char link[32];
    const std::string path = "/proc/self/fd/" + std::string(e->d_name);
    const ssize_t n = readlink(path.c_str(), link, sizeof(link));
    if (n < 7 || std::memcmp(link, "socket:", 7) != 0) continue;
    if (matches(fd, local_addr, local_port, remote_addr, remote_port)) {
      fd_ = fd;
      break;
    }
  }
  closedir(d);
}

bool ConnectionProbe::peer_gone() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0;
  }
  return false;
}

}  // namespace pagedkv::server
