// The debug REPL's TCP service (repl_service.h).
#include "cli/repl_service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "actors/repl_command.h"
#include "log/log.h"

namespace maestro {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxClients = 16;

struct Client {
  int fd = -1;
  std::string peer, buf;
  bool authed = false, too_long = false;
  Clock::time_point since = Clock::now();
};

std::string random_token() {
  std::random_device rd;
  std::string t;
  for (int i = 0; i < 32; ++i) t += "0123456789abcdef"[rd() % 16];
  return t;
}

bool same(const std::string& a, const std::string& b) {  // constant time in the token's length
  unsigned diff = unsigned(a.size() ^ b.size());
  for (size_t i = 0; i < b.size(); ++i) diff |= unsigned(uint8_t(i < a.size() ? a[i] : 0) ^ uint8_t(b[i]));
  return diff == 0;
}

}  // namespace

struct ReplService::Impl {
  int listen_fd = -1;
  std::string token, token_file;
  std::function<std::string(const std::string&)> ask;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::vector<Client> clients;
  Clock::time_point next_attempt = Clock::now();  // rate limit of token attempts

  void send_all(Client& c, std::string s) {
    // answers end with one empty line: no empty line inside
    while (s.find("\n\n") != std::string::npos) s.replace(s.find("\n\n"), 2, "\n");
    if (!s.empty() && !s.ends_with('\n')) s += '\n';
    s += '\n';
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(c.fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) {
        drop(c);
        return;
      }
      off += size_t(n);
    }
  }
  void drop(Client& c) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
  }

  void on_line(Client& c, const std::string& line) {
    if (!c.authed) {
      const auto now = Clock::now();
      if (now < next_attempt) {
        log(LogLevel::Warn, "repl: token attempt from {} refused (rate limit)", c.peer);
        send_all(c, "error: too many token attempts; retry in a second");
        return drop(c);
      }
      if (line.starts_with("token ") && same(line.substr(6), token)) {
        c.authed = true;
        return send_all(c, "ok");
      }
      next_attempt = now + std::chrono::seconds(1);
      log(LogLevel::Warn, "repl: wrong token from {}, refused", c.peer);
      send_all(c, "error: wrong token");
      return drop(c);
    }
    send_all(c, ask(line));
    const ReplParse p = parse_repl_command(line);
    if (p.ok && (p.command.kind == ReplCommand::Kind::Detach || p.command.kind == ReplCommand::Kind::Quit)) drop(c);
  }

  void read_from(Client& c) {
    char buf[65536];
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) return drop(c);
    for (ssize_t i = 0; i < n && c.fd >= 0; ++i) {
      if (buf[i] != '\n') {
        if (c.buf.size() <= kReplMaxLine) c.buf += buf[i];
        else c.too_long = true;
        continue;
      }
      const std::string line = c.too_long ? std::string(kReplMaxLine + 1, 'x') : c.buf;
      c.buf.clear();
      c.too_long = false;
      if (line.size() > kReplMaxLine && !c.authed) {
        send_all(c, "error: line too long");
        drop(c);
      } else {
        on_line(c, line);
      }
    }
  }

  void serve() {
    while (!stop.load()) {
      std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
      for (const Client& c : clients) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 100) < 0) continue;
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(clients[i - 1]);
      // a client that has not presented its token within 10 s is let go
      for (Client& c : clients)
        if (!c.authed && c.fd >= 0 && Clock::now() - c.since > std::chrono::seconds(10)) drop(c);
      std::erase_if(clients, [](const Client& c) { return c.fd < 0; });
      if (fds[0].revents & POLLIN) {
        sockaddr_in peer{};
        socklen_t len = sizeof peer;
        const int fd = ::accept(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len);
        if (fd < 0) continue;
        char ip[INET_ADDRSTRLEN] = "?";
        ::inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
        timeval tv{1, 0};  // a client that does not read its answers is dropped, not waited for
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        Client c;
        c.fd = fd;
        c.peer = fmt::format("{}:{}", ip, ntohs(peer.sin_port));
        if (clients.size() >= kMaxClients) {
          send_all(c, "error: too many clients");
          drop(c);
          continue;
        }
        clients.push_back(std::move(c));
      }
    }
    for (Client& c : clients) drop(c);
  }
};

ReplService::ReplService(const std::string& listen, std::string token_file, const std::string& checkpoint_dir)
    : impl_(std::make_shared<Impl>()) {
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  in_addr addr{};
  int port = 0;
  try {
    port = colon == std::string::npos ? 0 : std::stoi(listen.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (colon == std::string::npos || ::inet_pton(AF_INET, host.c_str(), &addr) != 1 || port < 1 || port > 65535)
    throw ReplServiceError(2, fmt::format("[repl] listen = \"{}\": expected IPV4:PORT, e.g. \"127.0.0.1:4242\"", listen));
  const bool loopback = (ntohl(addr.s_addr) >> 24) == 127;
  if (!loopback && token_file.empty())
    throw ReplServiceError(2, fmt::format("[repl] listen = \"{}\" is not on loopback: set [repl] token_file", listen));
  if (token_file.empty()) {
    if (checkpoint_dir.empty())
      throw ReplServiceError(2, "[repl] listen: no token_file and no checkpoint dir to put the token next to: set [repl] token_file");
    std::string dir = checkpoint_dir;
    while (dir.size() > 1 && dir.ends_with('/')) dir.pop_back();
    token_file = dir + ".repl-token";
  }
  impl_->token = random_token();
  impl_->token_file = token_file;
  const int tf = ::open(token_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (tf < 0 || ::fchmod(tf, 0600) != 0 || ::write(tf, (impl_->token + "\n").data(), impl_->token.size() + 1) < 0) {
    if (tf >= 0) ::close(tf);
    throw ReplServiceError(1, fmt::format("[repl] token_file '{}': cannot write it: {}", token_file, std::strerror(errno)));
  }
  ::close(tf);
  impl_->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(impl_->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = addr;
  sa.sin_port = htons(uint16_t(port));
  if (impl_->listen_fd < 0 || ::bind(impl_->listen_fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(impl_->listen_fd, 16) != 0) {
    const std::string why = std::strerror(errno);
    if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
    throw ReplServiceError(1, fmt::format("[repl] listen = \"{}\": {}", listen, why));
  }
}

ReplService::~ReplService() {
  impl_->stop.store(true);
  if (impl_->thread.joinable()) impl_->thread.join();
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
}

const std::string& ReplService::token_file() const { return impl_->token_file; }

ReplFrontEnd ReplService::front_end() {
  std::shared_ptr<Impl> impl = impl_;
  return ReplFrontEnd{[impl](std::function<std::string(const std::string&)> ask) {
                        impl->ask = std::move(ask);
                        impl->thread = std::thread([impl] { impl->serve(); });
                      },
                      [impl] {
                        impl->stop.store(true);
                        if (impl->thread.joinable()) impl->thread.join();
                      }};
}

}  // namespace maestro
