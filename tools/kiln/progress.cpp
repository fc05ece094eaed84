// Progress lines on stderr (progress.h).
#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "cli.h"

namespace kiln::cli {

int terminal_columns() {
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    const int n = std::atoi(c);
    if (n > 0) return n;
  }
  return 80;
}

Progress::Progress(int total) : total_(total) {
  if (global_options().no_progress || global_options().quiet || total <= 0) {
    mode_ = Mode::off;
  } else {
    mode_ = isatty(STDERR_FILENO) == 1 ? Mode::bar : Mode::lines;
  }
}

void Progress::step(int done, std::string_view line) {
  if (mode_ == Mode::off) return;
  if (mode_ == Mode::lines) {
    fmt::print(stderr, "[{}/{}] {}\n", done, total_, line);
    std::fflush(stderr);
    return;
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = done > 0 ? elapsed / done * (total_ - done) : 0;
  const std::string counts = fmt::format(" {}/{}", done, total_);
  const std::string tail = done < total_ ? fmt::format(" ETA {:.0f} s", eta) : fmt::format(" {:.1f} s", elapsed);
  // [=====     ] 3/10 ETA 4 s compiled sm_90 kiln_conv_...: the bar a third of the width (at most 40), the
  // line cut to fit so that it never wraps (a wrapped line cannot be redrawn with \r).
  const int columns = terminal_columns();
  const int bar = std::clamp(columns / 3, 10, 40);
  const int filled = total_ ? done * bar / total_ : bar;
  std::string out = fmt::format("[{}{}]{}{} ", std::string(static_cast<size_t>(filled), '='),
                                std::string(static_cast<size_t>(bar - filled), ' '), counts, tail);
  const int room = std::max(0, columns - 1 - static_cast<int>(out.size()));
  out += std::string(line.substr(0, static_cast<size_t>(room)));
  out.resize(static_cast<size_t>(std::max(columns - 1, 0)), ' ');
  fmt::print(stderr, "\r{}", out);
  std::fflush(stderr);
  open_ = true;
}

void Progress::finish() {
  if (open_) fmt::print(stderr, "\n");
  open_ = false;
}

}  // namespace kiln::cli
