// The files under templates/kiln/, embedded into the library at build time (codegen/embed_headers.cmake,
// shared with NVRTC code generation).
#pragma once

#include "codegen/embedded_headers.h"

namespace kiln::emu::detail {

using codegen::EmbeddedFile;
using codegen::kEmbeddedTemplateCount;
using codegen::kEmbeddedTemplates;

}  // namespace kiln::emu::detail
