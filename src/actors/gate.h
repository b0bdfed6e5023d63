// The gate: the address a multi-process run advertises (--listen, the
// spawned workers' --worker) is a plain TCP listener of Maestro's, not
// CAF's. A worker first sends a fixed 64-byte preamble — magic, protocol
// version, build id — and gets back the port of the CAF middleman's door
// on the same host; only then does it speak CAF. A peer sending anything
// else (garbage, another program, another version or build) is refused
// there with a message naming it, and CAF never sees its bytes: CAF 0.17's
// BASP parser, fed garbage, can stall later handshakes on that port.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace maestro {

class Gate {
 public:
  // Listens on host:port (port 0 = any); throws std::runtime_error.
  Gate(const std::string& host, uint16_t port, uint16_t caf_port);
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  uint16_t port() const { return port_; }

 private:
  void serve();
  int fd_ = -1;
  uint16_t port_ = 0, caf_port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The worker's side: the preamble to host:port, within `timeout_s`. Returns
// the CAF port, or throws std::runtime_error (unreachable; the message of a
// refusal starts with "refused: ").
uint16_t pass_gate(const std::string& host, uint16_t port, double timeout_s);

}  // namespace maestro
