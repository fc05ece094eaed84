// A real redis-server for the remote cache tier's tests (Debian's, installed by tools/setup.sh --test),
// started on a free loopback port with its own directory and stopped (or killed) by the test.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace kiln::testing {

// A loopback port nothing listens on right now (the kernel's choice for port 0). Another process could take
// it before the server binds it: RedisServer retries with a new port then.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

// Sends `request` to 127.0.0.1:port and returns what comes back first ("" when nothing listens).
inline std::string loopback_exchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) got.assign(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return got;
}

class RedisServer {
 public:
  // Starts a server with `config` ("--requirepass", "secret", "--maxmemory", "1mb", ...) beside the
  // defaults: loopback only, no persistence. A failure to start is a test failure (ok() false).
  explicit RedisServer(const std::string& dir, std::vector<std::string> config = {}) : dir_(dir) {
    std::filesystem::create_directories(dir_);
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) start(config);
    if (pid_ <= 0)
      ADD_FAILURE() << "redis-server did not start (is Debian's redis-server installed? tools/setup.sh --test)";
  }
  ~RedisServer() { stop(SIGTERM); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool ok() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string url(int db = 0) const { return "redis://127.0.0.1:" + std::to_string(port_) + "/" + std::to_string(db); }

  // Ends the server: SIGTERM to stop it, SIGKILL to kill it the way a crash or an OOM killer would.
  void stop(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  void start(const std::vector<std::string>& config) {
    port_ = free_loopback_port();
    const std::string log = dir_ + "/redis-" + std::to_string(port_) + ".log";
    std::vector<std::string> args{
        "redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",   "--save", "", "--appendonly", "no",
        "--dir",        dir_,     "--logfile",           log,      "--daemonize", "no"};
    args.insert(args.end(), config.begin(), config.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) return;
    if (pid == 0) {
      // Dies with the test process (a test killed by ctest's timeout leaves no server behind), and holds
      // none of its descriptors.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::closefrom(3);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    // Ready when this server says so in its own log; one that could not bind the port exits instead (and
    // an answer on the port could be another test's server).
    for (int i = 0; i < 500; ++i) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) return;  // exited: the port was taken, try another
      std::ifstream f(log);
      const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (text.find("Ready to accept connections") != std::string::npos) {
        pid_ = pid;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }

  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kiln::testing
