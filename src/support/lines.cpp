#include "support/lines.h"

namespace kiln::support {

std::vector<std::string> lines_naming(std::string_view message, std::string_view source) {
  std::vector<std::string> out;
  const std::string lead = source.empty() ? std::string() : std::string(source) + ": ";
  size_t at = 0;
  while (at <= message.size()) {
    size_t nl = message.find('\n', at);
    if (nl == std::string_view::npos) nl = message.size();
    const std::string_view line = message.substr(at, nl - at);
    if (!line.empty()) out.push_back(line.starts_with(lead) ? std::string(line) : lead + std::string(line));
    at = nl + 1;
  }
  return out;
}

std::string message_naming(std::string_view message, std::string_view source) {
  std::string out;
  for (const std::string& line : lines_naming(message, source)) out += (out.empty() ? "" : "\n") + line;
  return out;
}

Status status_naming(const Status& s, std::string_view source) {
  return {s.code(), message_naming(s.message(), source)};
}

}  // namespace kiln::support
