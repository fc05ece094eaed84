// The byte layout of one cache entry file (docs/cache.md, "Entry file format"). Pure functions over bytes:
// no file system, so that every corruption can be tested by editing a buffer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/cache.h"

namespace kiln::cache_format {

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'K', 'R', 'N', '\0'};
// Bump when the layout changes; readers treat any other version as a miss (and remove the file).
// Version 2 stores the entry's kind (CacheKind) where version 1 had a reserved 0.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr size_t kHeaderBytes = 40;    // magic, version, kind, total length, key
inline constexpr size_t kChecksumBytes = 16;  // XXH3-128 of everything before it

std::string encode(const CacheKey& key, const CacheEntry& entry, CacheKind kind = CacheKind::nvrtc);

// The entry held in `bytes` if they are a complete, intact entry of `kind` for `key`; otherwise nothing,
// with the reason in `why` ("checksum mismatch (corrupted)", "truncated: ...": what `kiln cache verify`
// prints). With `metadata_only`, the binary and PTX are not copied out (the checksum is still checked).
std::optional<CacheEntry> decode(std::string_view bytes, const CacheKey& key, CacheKind kind,
                                 bool metadata_only = false, std::string* why = nullptr);

}  // namespace kiln::cache_format
