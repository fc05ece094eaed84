// Writes the seed corpora and the JSON dictionary the harnesses start from (tools/fuzz.sh runs it before
// each fuzzing run, so both follow the registry: a new op is a new seed and new dictionary words).
//
//   kiln_fuzz_seeds OUT   ->  OUT/graph_json/op_<op>.json   one small valid graph per op (tests/op_cases.h)
//                             OUT/npy/*                       valid files of each dtype and rank, prefixed as
//                                                             fuzz_npy.cpp reads its input
//                             OUT/cache_entry/*               nvrtc and emu entries, plain and "repair" mode
//                             OUT/graph_json.dict             the format's keys, op, attribute, port,
//                                                             dtype, layout and choice names
// tools/fuzz.sh adds samples/graphs/*.json and tests/data/bad/* to the JSON corpus.
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "cache/entry_format.h"
#include "kiln/json.h"
#include "kiln/npy.h"
#include "op_cases.h"
#include "ops/registry.h"
#include "support/atomic_file.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

void write(const fs::path& p, const std::string& bytes) {
  if (Status st = support::write_file_atomic(p, bytes); !st.ok()) {
    std::fprintf(stderr, "kiln_fuzz_seeds: %s\n", st.message().c_str());
    std::exit(1);
  }
}

// A libFuzzer dictionary line: the word as a C string literal.
std::string dict_word(std::string_view w) {
  std::string s = "\"";
  for (char c : w) {
    if (c == '"' || c == '\\') s += '\\';
    s += c;
  }
  return s + "\"\n";
}

void graph_seeds(const fs::path& dir) {
  for (const auto& [op, build] : testing::op_cases()) {
    Graph g("seed_" + op);
    build(g);
    if (Status st = g.verify(); !st.ok()) {
      std::fprintf(stderr, "kiln_fuzz_seeds: the case of '%s' does not verify: %s\n", op.c_str(), st.message().c_str());
      std::exit(1);
    }
    write(dir / ("op_" + op + ".json"), graph_to_json(g));
  }
}

void npy_seeds(const fs::path& dir) {
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  const std::vector<std::vector<int64_t>> shapes = {{}, {3}, {2, 5}, {1, 3, 4}, {2, 3, 2, 2}};
  int n = 0;
  for (int t = 0; t < 3; ++t) {
    for (const auto& dims : shapes) {
      std::string prefix = {static_cast<char>(t), static_cast<char>(dims.size())};
      for (int64_t d : dims) prefix += static_cast<char>(d - 1);
      const HostTensor h = random_tensor(Shape(dims), types[t], 7, static_cast<uint64_t>(n));
      write(dir / ("tensor_" + std::to_string(n++) + ".bin"), prefix + npy_encode(h));
    }
  }
}

void cache_seeds(const fs::path& dir) {
  int n = 0;
  for (CacheKind kind : kCacheKinds) {
    CacheEntry e;
    e.kernel_name = kind == CacheKind::emu ? "kiln_emu_tu" : "kiln_conv2d_0123abcd";
    e.arch = kind == CacheKind::emu ? "host" : "sm_90a";
    e.cubin = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 1, 2, 3};
    e.ptx = kind == CacheKind::emu ? "" : ".version 8.0\n.target sm_90a\n";
    e.info.registers = 64;
    e.info.shared_bytes = 16384;
    e.info.compile_ms = 12.5;
    e.manifest = "kiln-cache-key 1\nfamily=conv2d\n";
    const CacheKey key = xxh3_128(e.kernel_name);
    const std::string bytes = cache_format::encode(key, e, kind);
    write(dir / ("entry_" + std::to_string(n++) + ".bin"), std::string(1, '\0') + bytes);
    write(dir / ("entry_" + std::to_string(n++) + ".bin"), std::string(1, '\1') + bytes);
  }
}

void dictionary(const fs::path& file) {
  std::set<std::string> words = {"kiln.graph", "format",
                                 "version",    "name",
                                 "tensors",    "nodes",
                                 "outputs",    "shape",
                                 "dtype",      "layout",
                                 "kind",       "op",
                                 "inputs",     "attrs",
                                 "input",      "parameter",
                                 "true",       "false",
                                 "null",       "1e308",
                                 "-1",         "9223372036854775807"};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) words.emplace(dtype_name(t));
  for (int l = 0; l < kLayoutCount; ++l) words.emplace(layout_name(static_cast<Layout>(l)));
  for (const OpDef& def : op_registry()) {
    words.emplace(def.name);
    for (const PortSpec& p : def.inputs) words.emplace(p.name);
    for (const PortSpec& p : def.outputs) words.emplace(p.name);
    for (const AttrSpec& a : def.attrs) {
      words.emplace(a.name);
      for (std::string_view c : a.choices) words.emplace(c);
    }
  }
  std::string text = "# kiln graph JSON: written by kiln_fuzz_seeds (fuzz/make_seeds.cpp)\n";
  for (const std::string& w : words) text += dict_word(w);
  write(file, text);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln_fuzz_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* d : {"graph_json", "npy", "cache_entry"}) fs::create_directories(out / d);
  graph_seeds(out / "graph_json");
  npy_seeds(out / "npy");
  cache_seeds(out / "cache_entry");
  dictionary(out / "graph_json.dict");
  return 0;
}
