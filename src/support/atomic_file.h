// Publishing a whole file at once: write a uniquely named temporary file in the target's directory, then
// rename it over the target. Readers (other threads, other processes) see the old file, no file, or the
// whole new file; never a partial one. This is how every file kiln writes for others to read is written:
// cache entries, counters, saved sources, emu shared objects, .npy and JSON outputs.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "kiln/status.h"

namespace kiln::support {

struct AtomicWriteOptions {
  // fsync the file before the rename: the file survives power loss once the call returns (costs a disk
  // flush; KILN_CACHE_FSYNC=1 turns it on for cache entries).
  bool fsync = false;
  // Permission bits of the new file, before the umask: 0600 for what only this user's processes may read
  // (cache entries are code they will run), 0666 (the umask decides) for the user's own outputs.
  unsigned mode = 0666;
};

// Writes `bytes` to `path` atomically as described above. The temporary file is created with O_EXCL and
// removed again on any failure. Errors say "cannot write '<path>': <why>".
Status write_file_atomic(const std::filesystem::path& path, std::string_view bytes,
                         const AtomicWriteOptions& options = {});

// The same in the directory open as `dir_fd`, under `name` (a plain file name); `shown` is the path that
// errors give. The temporary file is created relative to `dir_fd` with O_EXCL | O_NOFOLLOW and renamed with
// renameat, so nothing outside that directory is ever written, whatever links lie in it.
Status write_file_atomic_at(int dir_fd, const std::string& name, std::string_view bytes,
                            const AtomicWriteOptions& options, const std::filesystem::path& shown);

// ".tmp.<pid>.<thread>.<counter>.<random>": unique between the threads of a process (thread number and
// a process-wide counter), between processes (pid) and across a reused pid (random bits).
std::string unique_temp_suffix();

// Whether a file name is one of write_file_atomic's temporary files (holds ".tmp."): left behind only by a
// process killed between create and rename.
bool is_temp_name(std::string_view file_name);

}  // namespace kiln::support
