// Hit/miss/store/eviction/bad-entry counters, per kind of entry, shared by every process using one cache
// directory.
//
// Each process adds to one of kShards small text files (<dir>/stats/<pid % kShards>.txt, lines
// "<kind>.<counter> <value>") by reading it, adding, and publishing the sum through a temporary file and
// rename. There is no lock: two processes updating the same shard at the same moment can lose one update.
// Spreading processes over shards makes that rare, and the counters are for humans (`kiln cache stats`),
// so approximate is the right trade against a lock file that a crashed process could leave behind.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>

#include "kiln/cache.h"

namespace kiln::cache_counters {

enum Counter { hits, misses, stores, evictions, bad_entries, remote_hits, remote_misses, remote_errors, kCount };
// counts[kind][counter]
using Counts = std::array<std::array<int64_t, kCount>, kCacheKindCount>;
inline constexpr int kShards = 16;

// Adds `delta` to this process's shard of <cache_dir>/stats; errors are ignored (counters never fail a
// lookup or a store).
void add(const std::filesystem::path& cache_dir, const Counts& delta);
// The sum over every shard; unreadable or malformed lines count as 0. Lines without a kind (written
// before there were kinds, when every entry was an NVRTC kernel) count for nvrtc. Sums saturate at
// INT64_MAX (a shard file may say anything).
Counts read_all(const std::filesystem::path& cache_dir);

// a + b, saturating at INT64_MAX (a >= 0).
int64_t saturating_add(int64_t a, int64_t b);

}  // namespace kiln::cache_counters
