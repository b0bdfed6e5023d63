// maestro-repl HOST:PORT: attaches to a running maestro-run whose [repl]
// listen is set (cli/repl_service.h). It presents the token (--token, or
// --token-file, the file maestro-run wrote), then sends each line of stdin
// and prints the answer (which ends with an empty line on the wire), until
// detach, quit or end of input. Exit: 0 done; 1 connection lost or token
// refused; 2 bad command line.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

namespace {

// Reads one answer: lines up to an empty one. False when the connection closed first.
bool read_answer(int fd, std::string& pending, std::string& answer) {
  answer.clear();
  for (;;) {
    const size_t end = pending.find("\n\n");
    if (end != std::string::npos) {
      answer = pending.substr(0, end + 1);
      pending.erase(0, end + 2);
      return true;
    }
    if (pending == "\n") {  // an empty answer
      pending.clear();
      return true;
    }
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    pending.append(buf, size_t(n));
  }
}

bool send_line(int fd, const std::string& line) {
  const std::string s = line + "\n";
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"maestro-repl: attach to a running maestro-run's debug REPL ([repl] listen)"};
  std::string address, token, token_file;
  app.add_option("address", address, "HOST:PORT of the run's [repl] listen")->required();
  auto* tok = app.add_option("--token", token, "the access token");
  app.add_option("--token-file", token_file, "read the token from this file (what [repl] token_file names)")
      ->excludes(tok);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (token.empty() && !token_file.empty()) {
    std::ifstream in(token_file);
    if (!(in >> token)) {
      fmt::print(stderr, "maestro-repl: error: --token-file '{}': cannot read a token from it\n", token_file);
      return 2;
    }
  }
  if (token.empty()) {
    fmt::print(stderr, "maestro-repl: error: a token is required (--token or --token-file)\n");
    return 2;
  }
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  int port = 0;
  try {
    port = colon == std::string::npos ? 0 : std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1 || port < 1 || port > 65535) {
    fmt::print(stderr, "maestro-repl: error: '{}': expected IPV4:PORT\n", address);
    return 2;
  }
  sa.sin_port = htons(uint16_t(port));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    fmt::print(stderr, "maestro-repl: error: cannot connect to {}: {}\n", address, std::strerror(errno));
    return 1;
  }
  std::string pending, answer;
  if (!send_line(fd, "token " + token) || !read_answer(fd, pending, answer) || answer != "ok\n") {
    fmt::print(stderr, "maestro-repl: error: {}: {}", address, answer.empty() ? "connection closed\n" : answer);
    return 1;
  }
  const bool tty = isatty(STDIN_FILENO);
  std::string line;
  for (;;) {
    if (tty) std::fputs("maestro> ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (!send_line(fd, line) || !read_answer(fd, pending, answer)) {
      fmt::print(stderr, "maestro-repl: the run closed the connection\n");
      return 1;
    }
    std::fputs(answer.c_str(), stdout);
    std::fflush(stdout);
    const size_t b = line.find_first_not_of(" \t");
    const std::string word = b == std::string::npos ? "" : line.substr(b, line.find_first_of(" \t", b) - b);
    if (word == "detach" || word == "quit") break;
  }
  ::close(fd);
  return 0;
}
