// run_plan_emu (include/kiln/emu_plan.h) and the host <-> device-layout conversions every backend uses.
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "codegen/kernel_builder.h"
#include "kiln/emu_plan.h"
#include "kiln/engine.h"
#include "kiln/reference.h"
#include "runtime/device.h"
#include "support/half_float.h"
#include "support/stopwatch.h"

namespace kiln {

namespace {

// Calls f(logical_index, memory_offset) for every element of a tensor stored with `strides`.
template <class F>
void for_each_element(const Shape& shape, const std::vector<int64_t>& strides, F f) {
  const int r = shape.rank();
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < shape.numel(); ++i) {
    f(i, off);
    for (int d = r - 1; d >= 0; --d) {
      const auto du = static_cast<size_t>(d);
      if (++idx[du] < shape[d]) {
        off += strides[du];
        break;
      }
      off -= strides[du] * (shape[d] - 1);
      idx[du] = 0;
    }
  }
}

void put(unsigned char* p, DType t, double v) {
  switch (t) {
    case DType::f32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::f16: {
      const uint16_t h = support::f32_to_f16_bits(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::bf16: {
      const uint16_t h = support::f32_to_bf16_bits(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
  }
}

double get(const unsigned char* p, DType t) {
  switch (t) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return support::f16_bits_to_f32(h);
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return support::bf16_bits_to_f32(h);
    }
  }
  return 0;
}

}  // namespace

std::vector<unsigned char> to_device_bytes(const HostTensor& t, Layout layout) {
  const int64_t es = dtype_size(t.dtype);
  std::vector<unsigned char> bytes(static_cast<size_t>(t.numel() * es));
  for_each_element(t.shape, layout_strides(t.shape, layout), [&](int64_t i, int64_t off) {
    put(bytes.data() + off * es, t.dtype, t.data[static_cast<size_t>(i)]);
  });
  return bytes;
}

HostTensor from_device_bytes(const unsigned char* bytes, const Shape& shape, DType dtype, Layout layout) {
  HostTensor t(shape, dtype);
  const int64_t es = dtype_size(dtype);
  for_each_element(shape, layout_strides(shape, layout),
                   [&](int64_t i, int64_t off) { t.data[static_cast<size_t>(i)] = get(bytes + off * es, dtype); });
  return t;
}

// The emulator as an Engine device with the caller's launch options: the same Executable that
// Engine::compile gives (kernels, workspace, weight transforms), run once through host buffers.
Result<TensorMap> run_plan_emu(const Plan& p, const TensorMap& inputs, const EmuPlanOptions& options,
                               EmuPlanReport* report) {
  KILN_RETURN_IF_ERROR(check_bindings(p.graph, inputs));
  auto records = options.launch.profile ? std::make_shared<runtime::EmuLaunchRecords>() : nullptr;
  std::shared_ptr<runtime::Device> device = runtime::make_emu_device(options.launch, records);
  Engine engine = runtime::engine_on(device);
  KILN_ASSIGN_OR_RETURN(Executable exe, runtime::make_executable(device, p, {}, 0));
  RunReport run;
  const support::Stopwatch run_time;
  KILN_ASSIGN_OR_RETURN(TensorMap out, run_on_host_tensors(engine, exe, inputs, &run));
  if (report) {
    const CompileReport& c = exe.report();
    report->kernels_launched = run.kernels_launched + run.weight_transforms_run;
    report->distinct_kernels = c.distinct_kernels;
    report->compiled = c.host_compiled;
    report->generate_ms = c.codegen_ms;
    report->compile_ms = c.obtain_ms;
    report->run_ms = run_time.ms();
    report->entries = c.entries;
    report->warnings = c.warnings;
    if (records) report->launches = std::move(records->launches);
  }
  return out;
}

}  // namespace kiln
