// Helpers of the kernel cache fault tests (test_cache_faults.cpp, test_emu_cache_faults.cpp): child
// processes that run with a file-size limit, as an unprivileged user, or under a deadline (a cache
// operation that hangs must fail the test, not stop the test run), and the planting of links and FIFOs.
#pragma once

#include <gtest/gtest.h>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.h"

namespace kiln::cache_test {

// The user a root test process drops to, so that file permissions apply to the child (root ignores them).
inline constexpr uid_t kNobody = 65534;

struct ChildOptions {
  // As kNobody when this process is root (else as this user, for whom permissions already apply).
  bool unprivileged = false;
  // RLIMIT_FSIZE in bytes, with SIGXFSZ ignored: a write past it fails with EFBIG, as on a full disk.
  std::optional<rlim_t> file_size_limit;
  std::chrono::seconds timeout{120};
};

// In the child, before anything else: the user and the limits of `o`. Async-signal-safe calls only.
inline void enter_child(const ChildOptions& o) {
  if (o.unprivileged && ::geteuid() == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(125);
  }
  if (o.file_size_limit) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl;
    ::getrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = *o.file_size_limit;
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) ::_exit(126);
  }
}

// Waits for `pid` until `timeout` (then kills it); the exit code, 128 + the signal, or -1 on timeout.
inline int wait_child(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Runs `program args` (stdin /dev/null, stdout and stderr through files in `scratch_dir`) as `o` says.
// A child that runs past the timeout is killed: code -1.
inline subprocess::Proc run_child(const std::string& program, const std::vector<std::string>& args,
                                  const std::string& scratch_dir, const ChildOptions& o = {}) {
  const std::string out_path = scratch_dir + "/.child-stdout", err_path = scratch_dir + "/.child-stderr";
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  std::vector<std::string> all{program};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  subprocess::Proc p;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in, 0), ::dup2(out, 1), ::dup2(err, 2);
    enter_child(o);
    ::execve(program.c_str(), argv.data(), environ);
    ::_exit(127);
  }
  ::close(in), ::close(out), ::close(err);
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return p;
  }
  p.code = wait_child(pid, o.timeout);
  p.out = subprocess::slurp(out_path);
  p.err = subprocess::slurp(err_path);
  return p;
}

// Runs `body` in a forked child under `o`; its return value is the exit code (-1: it ran past the
// timeout, 128 + n: killed by signal n). The child reports with fprintf(stderr), not gtest assertions.
inline int in_child(const std::function<int()>& body, const ChildOptions& o = {}) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    enter_child(o);
    ::_exit(body());
  }
  if (pid < 0) return -2;
  return wait_child(pid, o.timeout);
}

// Makes `path` (and every directory above it up to and including `top`) owned by the user children run
// as with ChildOptions::unprivileged, so that such a child may use them as its own.
inline void give_to_child(const std::string& top, const std::string& path) {
  if (::geteuid() != 0) return;
  namespace fs = std::filesystem;
  for (fs::path p = path;; p = p.parent_path()) {
    ASSERT_EQ(::lchown(p.c_str(), kNobody, kNobody), 0) << p;
    if (p == fs::path(top) || !p.has_parent_path() || p == p.parent_path()) break;
  }
  if (fs::is_directory(path)) {
    for (const auto& e : fs::recursive_directory_iterator(path)) ::lchown(e.path().c_str(), kNobody, kNobody);
  }
}

inline void make_fifo(const std::string& path) {
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
}

}  // namespace kiln::cache_test
