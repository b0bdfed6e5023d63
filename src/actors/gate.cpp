// The gate of a multi-process run (gate.h).
#include "actors/gate.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "actors/processes.h"

namespace maestro {

namespace {

constexpr size_t kPreamble = 64;  // "MAESTRO\n" | u32 version | 52 bytes build id, NUL padded
constexpr char kMagic[8] = {'M', 'A', 'E', 'S', 'T', 'R', 'O', '\n'};

std::string preamble() {
  std::string p(kPreamble, '\0');
  std::memcpy(p.data(), kMagic, 8);
  const uint32_t v = htonl(uint32_t(kProcessProtocolVersion));
  std::memcpy(p.data() + 8, &v, 4);
  const std::string id = build_id();
  std::memcpy(p.data() + 12, id.data(), std::min(id.size(), kPreamble - 12));
  return p;
}

// Reads or writes exactly n bytes before the deadline; false otherwise.
bool transfer(int fd, char* buf, size_t n, bool reading, std::chrono::steady_clock::time_point deadline) {
  size_t done = 0;
  while (done < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, short(reading ? POLLIN : POLLOUT), 0};
    if (::poll(&p, 1, int(left.count())) <= 0) return false;
    const ssize_t k = reading ? ::recv(fd, buf + done, n - done, 0) : ::send(fd, buf + done, n - done, MSG_NOSIGNAL);
    if (k <= 0) return false;
    done += size_t(k);
  }
  return true;
}

std::string peer_of(const sockaddr_storage& a) {
  char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
  ::getnameinfo(reinterpret_cast<const sockaddr*>(&a), sizeof a, host, sizeof host, serv, sizeof serv,
                NI_NUMERICHOST | NI_NUMERICSERV);
  return fmt::format("{}:{}", host, serv);
}

}  // namespace

Gate::Gate(const std::string& host, uint16_t port, uint16_t caf_port) : caf_port_(caf_port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res); rc != 0)
    throw std::runtime_error(fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc)));
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd_ < 0) continue;
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd_, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd_, 64) == 0) break;
    why = std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
  }
  ::freeaddrinfo(res);
  if (fd_ < 0) throw std::runtime_error(fmt::format("cannot listen on {}:{}: {}", host, port, why));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  thread_ = std::thread([this] { serve(); });
}

Gate::~Gate() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

void Gate::serve() {
  const std::string expected = preamble();
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int c = ::accept4(fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (c < 0) continue;
    // One peer at a time, each bounded to 2 s: a silent peer delays the next one by that much at most.
    std::string got(kPreamble, '\0');
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    std::string refusal;
    if (!transfer(c, got.data(), kPreamble, true, deadline))
      refusal = "it sent no Maestro preamble within 2 s";
    else if (std::memcmp(got.data(), kMagic, 8) != 0)
      refusal = "not a maestro-run worker (garbage instead of the preamble)";
    else if (got.compare(8, 4, expected, 8, 4) != 0) {
      uint32_t v = 0;
      std::memcpy(&v, got.data() + 8, 4);
      refusal = fmt::format("protocol version {}, this coordinator speaks {}", ntohl(v), kProcessProtocolVersion);
    } else if (got.compare(12, kPreamble - 12, expected, 12, kPreamble - 12) != 0)
      refusal = fmt::format("build {}, this coordinator is build {}: run the same maestro-run binary everywhere",
                            std::string(got.c_str() + 12), build_id());
    std::string answer(2 + 126, '\0');  // u16 CAF port (0 = refused) | the refusal, NUL padded
    const uint16_t caf = htons(refusal.empty() ? caf_port_ : 0);
    std::memcpy(answer.data(), &caf, 2);
    std::memcpy(answer.data() + 2, refusal.data(), std::min(refusal.size(), answer.size() - 3));
    if (!refusal.empty()) std::fprintf(stderr, "maestro-run: refused a connection from %s: %s\n", peer_of(from).c_str(), refusal.c_str());
    transfer(c, answer.data(), answer.size(), false, std::chrono::steady_clock::now() + std::chrono::seconds(2));
    ::close(c);
  }
}

uint16_t pass_gate(const std::string& host, uint16_t port, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
    throw std::runtime_error(fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc)));
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) throw std::runtime_error(why);
  std::string p = preamble(), answer(128, '\0');
  const bool ok = transfer(fd, p.data(), p.size(), false, deadline) && transfer(fd, answer.data(), answer.size(), true, deadline);
  ::close(fd);
  if (!ok) throw std::runtime_error("the gate did not answer");
  uint16_t caf = 0;
  std::memcpy(&caf, answer.data(), 2);
  if (ntohs(caf) == 0) throw std::runtime_error("refused: " + std::string(answer.c_str() + 2));
  return ntohs(caf);
}

}  // namespace maestro
