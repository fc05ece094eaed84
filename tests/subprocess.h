// Running a program as a subprocess from a test: its exit code, stdout and stderr.
#pragma once

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
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

extern char** environ;

namespace kiln::subprocess {

struct Proc {
  int code = -1;  // the exit status; -1 when the program could not start or was killed
  std::string out;
  std::string err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs `program` with `args` (stdin from /dev/null); stdout and stderr go through files in `scratch_dir`.
// A program that does not start, is killed by a signal or runs past `timeout` is a test failure.
inline Proc run_process(const std::string& program, const std::vector<std::string>& args,
                        const std::string& scratch_dir, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  std::string out_path = (std::filesystem::path(scratch_dir) / ".stdout").string();
  std::string err_path = (std::filesystem::path(scratch_dir) / ".stderr").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> all{program};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  Proc p;
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << program << ": " << std::strerror(rc);
    return p;
  }
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << program << " timed out";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) {
    p.code = WEXITSTATUS(status);
  } else {
    ADD_FAILURE() << program << " was killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    p.code = -1;
  }
  p.out = slurp(out_path);
  p.err = slurp(err_path);
  return p;
}

}  // namespace kiln::subprocess
