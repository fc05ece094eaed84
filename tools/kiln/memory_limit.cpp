#include "memory_limit.h"

#include <unistd.h>

#include <fmt/format.h>

namespace kiln::cli {

namespace {

std::string human(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} bytes", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

}  // namespace

int64_t default_max_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return int64_t{8} << 30;  // unknown: 8 GiB
  return static_cast<int64_t>(static_cast<double>(pages) * static_cast<double>(page) * 0.75);
}

double run_memory_estimate(const Graph& g, DeviceKind device) {
  // In double: shapes are checked to 2^48 elements each, so a sum of them fits a double's range exactly
  // enough for a limit, and never wraps.
  double host = 0, stored = 0;
  for (const TensorInfo& t : g.tensors()) {
    const double n = static_cast<double>(t.shape.numel());
    host += n * 8;
    stored += n * static_cast<double>(dtype_size(t.dtype));
  }
  return device == DeviceKind::ref ? host : host + 2 * stored;
}

std::string memory_refusal(const Graph& g, DeviceKind device, int64_t limit, bool limit_given) {
  const double need = run_memory_estimate(g, device);
  if (need <= static_cast<double>(limit)) return {};
  return fmt::format(
      "graph '{}' needs about {:.0f} bytes ({}) of host memory on {} (its {} tensors as f64{}), more than "
      "--max-memory {} bytes ({}{}): give a larger --max-memory, or smaller shapes",
      g.name(), need, human(need), device_kind_name(device), g.tensors().size(),
      device == DeviceKind::ref ? "" : ", and in their storage types for the device's buffers and workspace", limit,
      human(static_cast<double>(limit)), limit_given ? "" : ", the default: 3/4 of this machine's memory");
}

}  // namespace kiln::cli
