// Warp operations of the emu backend (docs/emu.md, "Warp operations"): the rendezvous, shuffles, ballots,
// mma.m16n8k16 and ldmatrix.
#include <cstring>

#include "runtime/emu/worker.h"

namespace kiln::emu::detail {
namespace {

float half_to_float(unsigned h) {
  unsigned sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 31) {
    u = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float bf16_to_float(unsigned b) {
  unsigned u = (b & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void warp_shuffle(Worker& w, unsigned base, unsigned mask, const kiln_emu_warp_op& me) {
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    kiln_emu_warp_op* op = w.fibers[base + l].op;
    const unsigned width = static_cast<unsigned>(op->width), gbase = l & ~(width - 1);
    const unsigned arg = static_cast<unsigned>(op->arg);
    unsigned src = l;
    switch (op->kind) {
      case KILN_EMU_SHFL_IDX: src = gbase + (arg & (width - 1)); break;
      case KILN_EMU_SHFL_UP: src = (l - gbase) < arg ? l : l - arg; break;
      case KILN_EMU_SHFL_DOWN: src = (l - gbase) + arg >= width ? l : l + arg; break;
      default: {  // xor: later width groups are out of reach (PTX shfl.bfly: j > maxLane gives the own value)
        unsigned j = l ^ (arg & 31u);
        src = j > gbase + width - 1 ? l : j;
      }
    }
    if (src != l && !(mask >> src & 1u)) {
      fail([&] {
        return fmt::format("{}: {} at {} with mask 0x{:08x}: lane {} reads lane {}, which is not in the mask",
                           where(w.fibers[base + l]), kWarpOpNames[me.kind], site(me.file, me.line), mask, l, src);
      });
    }
    op->result = w.fibers[base + src].op->value;
  }
}

void warp_mma(Worker& w, unsigned base, int kind) {
  float A[16][16], B[16][8], C[16][8];
  auto cvt = [&](unsigned bits) { return kind == KILN_EMU_MMA_F16 ? half_to_float(bits) : bf16_to_float(bits); };
  for (unsigned lane = 0; lane < 32; ++lane) {
    const kiln_emu_warp_op& op = *w.fibers[base + lane].op;
    const unsigned g = lane >> 2, t = lane & 3u;
    for (unsigned i = 0; i < 8; ++i) {
      unsigned bits = (op.a[i / 2] >> (16 * (i & 1u))) & 0xffffu;
      A[g + ((i >> 1) & 1u) * 8][t * 2 + (i & 1u) + (i >= 4 ? 8 : 0)] = cvt(bits);
    }
    for (unsigned i = 0; i < 4; ++i) {
      unsigned bits = (op.b[i / 2] >> (16 * (i & 1u))) & 0xffffu;
      B[t * 2 + (i & 1u) + (i >= 2 ? 8 : 0)][g] = cvt(bits);
      C[g + (i >= 2 ? 8 : 0)][t * 2 + (i & 1u)] = op.c[i];
    }
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    kiln_emu_warp_op& op = *w.fibers[base + lane].op;
    const unsigned g = lane >> 2, t = lane & 3u;
    for (unsigned i = 0; i < 4; ++i) {
      unsigned m = g + (i >= 2 ? 8 : 0), n = t * 2 + (i & 1u);
      double acc = 0;
      for (int k = 0; k < 16; ++k) acc += static_cast<double>(A[m][k]) * B[k][n];
      op.d[i] = static_cast<float>(acc + C[m][n]);
    }
  }
}

void warp_ldmatrix(Worker& w, unsigned base, const kiln_emu_warp_op& me) {
  uint16_t M[4][8][8];
  const int count = me.count;
  for (unsigned lane = 0; lane < 32; ++lane) {
    const kiln_emu_warp_op& op = *w.fibers[base + lane].op;
    if (op.count != count || op.trans != me.trans) {
      fail([&] {
        return fmt::format("{}: ldmatrix at {}: lanes disagree on the number of matrices or .trans",
                           where(w.fibers[base + lane]), site(me.file, me.line));
      });
    }
  }
  for (int j = 0; j < count; ++j) {
    for (unsigned r = 0; r < 8; ++r) {
      const Fiber& f = w.fibers[base + 8 * static_cast<unsigned>(j) + r];
      const void* addr = f.op->addr;
      if (!in_smem(w, addr, 16) || reinterpret_cast<uintptr_t>(addr) % 16 != 0) {
        fail([&] {
          return fmt::format("{}: ldmatrix at {}: row address {} is not 16-byte aligned shared memory", where(f),
                             site(me.file, me.line), addr);
        });
      }
      std::memcpy(M[j][r], addr, 16);
    }
  }
  if (w.launch->profile) {
    uint64_t rows[32];
    for (unsigned l = 0; l < 8 * static_cast<unsigned>(count); ++l)
      rows[l] = static_cast<uint64_t>(static_cast<const unsigned char*>(w.fibers[base + l].op->addr) - w.smem);
    w.recorder.ldmatrix({me.file, me.line, AccessOp::ldmatrix, AccessSpace::shared}, rows, count);
  }
  for (unsigned L = 0; L < 32; ++L) {
    kiln_emu_warp_op& op = *w.fibers[base + L].op;
    for (int j = 0; j < count; ++j) {
      unsigned lo, hi;
      if (!me.trans) {
        lo = M[j][L / 4][2 * (L % 4)], hi = M[j][L / 4][2 * (L % 4) + 1];
      } else {
        lo = M[j][2 * (L % 4)][L / 4], hi = M[j][2 * (L % 4) + 1][L / 4];
      }
      op.r[j] = lo | (hi << 16);
    }
  }
}

}  // namespace

void api_warp_op(kiln_emu_warp_op* op) {
  Worker* w = t_w;
  Fiber* f = w->cur;
  const unsigned lane = f->self.lane, base = f->linear - lane, n = static_cast<unsigned>(w->fibers.size());
  if (op->kind < 0 || op->kind >= KILN_EMU_WARP_KIND_COUNT)
    fail([&] { return where(*f) + ": unknown warp operation"; });
  const char* name = kWarpOpNames[op->kind];
  const unsigned mask = op->mask;
  if (!(mask >> lane & 1u)) {
    fail([&] {
      return fmt::format("{}: {} at {}: mask 0x{:08x} does not include the calling lane {}", where(*f), name,
                         site(op->file, op->line), mask, lane);
    });
  }
  if (op->kind >= KILN_EMU_SHFL_IDX && op->kind <= KILN_EMU_SHFL_XOR &&
      (op->width < 1 || op->width > 32 || (op->width & (op->width - 1)) != 0)) {
    fail([&] {
      return fmt::format("{}: {} at {}: width {} is not a power of two in [1, 32]", where(*f), name,
                         site(op->file, op->line), op->width);
    });
  }
  if (op->kind >= KILN_EMU_MMA_F16 && base + 32 > n) {
    fail([&] {
      return fmt::format("{}: {} at {} needs all 32 lanes of the warp; the block has {} threads", where(*f), name,
                         site(op->file, op->line), n);
    });
  }
  f->op = op;
  f->state = FState::warp;
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    if (base + l >= n || w->fibers[base + l].state != FState::warp) {
      yield();  // the last lane to arrive completes the operation and makes this fiber runnable
      return;
    }
  }
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    const Fiber& g = w->fibers[base + l];
    if (g.op->kind != op->kind || g.op->mask != mask) {
      fail([&] {
        return fmt::format("{}: {} at {} with mask 0x{:08x} meets lane {} at {} at {} with mask 0x{:08x}", where(*f),
                           name, site(op->file, op->line), mask, l, kWarpOpNames[g.op->kind],
                           site(g.op->file, g.op->line), g.op->mask);
      });
    }
  }
  switch (op->kind) {
    case KILN_EMU_SYNCWARP: break;
    case KILN_EMU_BALLOT: {
      uint64_t r = 0;
      for (unsigned l = 0; l < 32; ++l) {
        if ((mask >> l & 1u) && w->fibers[base + l].op->arg) r |= uint64_t{1} << l;
      }
      for (unsigned l = 0; l < 32; ++l) {
        if (mask >> l & 1u) w->fibers[base + l].op->result = r;
      }
      break;
    }
    case KILN_EMU_MMA_F16:
    case KILN_EMU_MMA_BF16:
      warp_mma(*w, base, op->kind);
      if (w->launch->profile) w->recorder.mma();
      break;
    case KILN_EMU_LDMATRIX: warp_ldmatrix(*w, base, *op); break;
    default: warp_shuffle(*w, base, mask, *op);
  }
  for (unsigned l = 0; l < 32; ++l) {
    if (mask >> l & 1u) w->fibers[base + l].state = FState::runnable;
  }
}

}  // namespace kiln::emu::detail
