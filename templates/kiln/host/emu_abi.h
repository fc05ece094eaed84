// The binary interface between a kernel compiled for the emulator (a shared object built from the kernel
// text and the host side of templates/kiln/device.cuh) and kiln's emu runtime (src/runtime/emu/).
//
// The shared object never links against kiln: after dlopen the runtime hands it a table of function
// pointers through kiln_emu_set_api(). Plain C types only, so both sides agree on the layout.
// Bump KILN_EMU_ABI_VERSION whenever anything here changes.
#pragma once

#include <stddef.h>
#include <stdint.h>

#define KILN_EMU_ABI_VERSION 2

extern "C" {

// Everything a fiber (one CUDA thread) knows about itself.
struct kiln_emu_thread {
  unsigned thread_idx[3];
  unsigned block_idx[3];
  unsigned block_dim[3];
  unsigned grid_dim[3];
  unsigned lane;  // linear thread index % 32
};

enum kiln_emu_warp_kind {
  KILN_EMU_SYNCWARP = 0,
  KILN_EMU_SHFL_IDX,
  KILN_EMU_SHFL_UP,
  KILN_EMU_SHFL_DOWN,
  KILN_EMU_SHFL_XOR,
  KILN_EMU_BALLOT,
  KILN_EMU_MMA_F16,   // mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
  KILN_EMU_MMA_BF16,  // mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
  KILN_EMU_LDMATRIX,  // ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16
  KILN_EMU_WARP_KIND_COUNT
};

// One lane's part of a warp operation; the lane blocks in warp_op() until the operation is complete.
struct kiln_emu_warp_op {
  int kind;
  unsigned mask;
  int width;        // shuffles
  int arg;          // shuffles: source lane, delta or lane mask; ballot: predicate
  uint64_t value;   // shuffles: this lane's value (low `bytes` bytes)
  uint64_t result;  // shuffles: the value read; ballot: the ballot
  unsigned a[4], b[2];
  float c[4], d[4];  // mma: A, B, C fragments in, D out
  const void* addr;  // ldmatrix: the row address this lane supplies
  int count;         // ldmatrix: 1, 2 or 4 matrices
  int trans;         // ldmatrix: .trans
  unsigned r[4];     // ldmatrix: destination registers
  const char* file;
  int line;
};

struct kiln_emu_api {
  unsigned abi_version;
  const kiln_emu_thread* (*self)(void);
  void (*syncthreads)(const char* file, int line);
  void (*warp_op)(kiln_emu_warp_op* op);
  // A static __shared__ declaration: one allocation per block for each `key` (the address of a static in the
  // shared object, one per declaration).
  void* (*shared_static)(const void* key, size_t bytes, size_t align, const char* file, int line);
  void* (*shared_dynamic)(void);
  // Checked mode: reports an access of `bytes` at `p` that lies outside every buffer argument of the launch.
  void (*check_global)(const void* p, size_t bytes, int is_store, const char* file, int line);
  void (*cp_async)(void* dst, const void* src, unsigned cp_size, unsigned src_size, const char* file, int line);
  void (*cp_commit)(void);
  void (*cp_wait)(unsigned n, const char* file, int line);
  // A failure the kernel itself reports (e.g. an unsupported prelude use); never returns to the fiber.
  void (*trap)(const char* message, const char* file, int line);
  // A shared-memory load or store through kiln::lds/kiln::sts: counted when the launch is profiled.
  void (*shared_access)(const void* p, unsigned bytes, int is_store, const char* file, int line);
};

}  // extern "C"
