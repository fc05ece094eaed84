// Known devices, from NVIDIA's published specifications (CUDA C++ Programming Guide, "Compute Capabilities"
// table, and each product's datasheet): SM count, shared memory per SM and per block (opt-in), registers,
// resident threads and blocks per SM, L2 size.
#include "kiln/target.h"

#include <fmt/format.h>

namespace kiln {

namespace {

struct Known {
  std::string_view name, arch;
  int sms;
  int64_t smem_sm, smem_block;
  int threads, blocks;
  int64_t l2;
};

constexpr int64_t KiB = 1024, MB = 1024 * 1024;
constexpr Known kKnown[] = {
    {"h200", "sm_90", 132, 228 * KiB, 227 * KiB, 2048, 32, 50 * MB},  // the default (first row)
    {"h100", "sm_90", 132, 228 * KiB, 227 * KiB, 2048, 32, 50 * MB},  // SXM5
    {"a100", "sm_80", 108, 164 * KiB, 163 * KiB, 2048, 32, 40 * MB},  // SXM4
    {"a10", "sm_86", 72, 100 * KiB, 99 * KiB, 1536, 16, 6 * MB},
    {"l4", "sm_89", 58, 100 * KiB, 99 * KiB, 1536, 24, 48 * MB},
};

Target from_known(const Known& k) {
  Target t;
  t.name = std::string(k.name);
  t.arch = std::string(k.arch);
  t.sm_count = k.sms;
  t.smem_per_sm = k.smem_sm;
  t.smem_per_block = k.smem_block;
  t.regs_per_sm = 65536;
  t.max_threads_per_sm = k.threads;
  t.max_blocks_per_sm = k.blocks;
  t.l2_bytes = k.l2;
  return t;
}

// "sm_90a" -> "sm_90": the arch whose default device a variant arch shares.
std::string_view base_arch(std::string_view arch) {
  if (!arch.empty() && (arch.back() == 'a' || arch.back() == 'f')) arch.remove_suffix(1);
  return arch;
}

}  // namespace

int Target::cc() const {
  int v = 0;
  for (char c : base_arch(arch))
    if (c >= '0' && c <= '9') v = v * 10 + (c - '0');
  return v;
}

std::string Target::key() const {
  return fmt::format("{} sms={} smem_block={} smem_sm={} regs_sm={} threads_sm={} blocks_sm={}", arch, sm_count,
                     smem_per_block, smem_per_sm, regs_per_sm, max_threads_per_sm, max_blocks_per_sm);
}

const Target& default_target() {
  static const Target t = from_known(kKnown[0]);
  return t;
}

Result<Target> target_named(std::string_view s) {
  for (const Known& k : kKnown)
    if (k.name == s) return from_known(k);
  // An arch: its default device (the first row of that arch), compiled for exactly the arch asked for.
  if (s.starts_with("sm_")) {
    for (const Known& k : kKnown) {
      if (k.arch == base_arch(s)) {
        Target t = from_known(k);
        t.arch = std::string(s);
        return t;
      }
    }
  }
  std::string names;
  for (const Known& k : kKnown) names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", k.name, k.arch);
  return invalid_argument(
      fmt::format("unknown target '{}': expected a device ({}) or one of their archs, e.g. sm_90a", s, names));
}

}  // namespace kiln
