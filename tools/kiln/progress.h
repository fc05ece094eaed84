// Progress of a long command (prewarm's compiles, bench's iterations) on stderr, so that stdout holds only
// results: on a terminal one line redrawn in place, sized to the terminal's width, with an ETA; otherwise one
// plain line per step (logs and CI keep them). Off with --no-progress or -q.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace kiln::cli {

class Progress {
 public:
  explicit Progress(int total);
  // Step `done` of the total finished; `line` says what it was ("compiled sm_90 kiln_conv_... (120 ms)").
  void step(int done, std::string_view line);
  // Ends the redrawn line (a terminal's); nothing otherwise.
  void finish();
  ~Progress() { finish(); }

  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

 private:
  enum class Mode { off, bar, lines } mode_;
  int total_;
  bool open_ = false;  // a bar is drawn and not ended
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The width of the terminal on stderr (TIOCGWINSZ, else $COLUMNS, else 80).
int terminal_columns();

}  // namespace kiln::cli
