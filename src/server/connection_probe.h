// ConnectionProbe: notices that an HTTP client went away while its request is still running.
// cpp-httplib hides the socket from handlers, so the probe finds this process's connected socket
// by its addresses (remote ip:port and local port) and polls it for a hang-up.
#pragma once
#include <string>

namespace tq {

class ConnectionProbe {
 public:
  ConnectionProbe() = default;
  // Finds the socket; an unfound one makes closed() always false.
  ConnectionProbe(const std::string& remote_addr, int remote_port, int local_port);
  bool valid() const { return fd_ >= 0; }
  // True once the peer closed or reset the connection (pending request bytes don't count).
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace tq
