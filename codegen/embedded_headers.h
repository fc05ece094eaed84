// Files embedded into the library at build time (codegen/embed_headers.cmake): kiln's device templates and
// the few CUDA toolkit headers they need under NVRTC. Each `data` is followed by a NUL byte, so it can be
// handed to NVRTC as a C string.
#pragma once

#include <cstddef>

namespace kiln::codegen {

struct EmbeddedFile {
  const char* path;  // the #include name: "kiln/device.cuh" (relative to templates/) or "cuda_fp16.h"
  const unsigned char* data;
  size_t size;  // without the trailing NUL
};

// Every file under templates/kiln/, sorted by path.
extern const EmbeddedFile kEmbeddedTemplates[];
extern const size_t kEmbeddedTemplateCount;

// cuda_bf16.h, cuda_bf16.hpp, cuda_fp16.h, cuda_fp16.hpp from the toolkit kiln was built with; none when
// it was built without the toolkit.
extern const EmbeddedFile kEmbeddedCudaHeaders[];
extern const size_t kEmbeddedCudaHeaderCount;

}  // namespace kiln::codegen
