// The files under templates/kiln/, embedded into the library at build time (embed_templates.cmake).
#pragma once

#include <cstddef>

namespace kiln::emu::detail {

struct EmbeddedFile {
  const char* path;  // relative to templates/, e.g. "kiln/device.cuh"
  const unsigned char* data;
  size_t size;
};

extern const EmbeddedFile kEmbeddedTemplates[];
extern const size_t kEmbeddedTemplateCount;

}  // namespace kiln::emu::detail
