// .npy tensor files: exact bytes as NumPy writes them, round trips, bf16 rounding, and every error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "temp_dir.h"

#include <stdlib.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "kiln/npy.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using NpyTest = TempDirTest;

HostTensor make(Shape s, DType t, std::vector<double> values) {
  HostTensor h(std::move(s), t);
  h.data = std::move(values);
  return h;
}

// A .npy file with the given header text (padded like NumPy's) and data bytes.
std::string npy_file(std::string_view dict, std::string_view data, int major = 1) {
  int len_bytes = major == 1 ? 2 : 4;
  size_t hlen = dict.size() + 1;
  size_t pad = 64 - (8 + static_cast<size_t>(len_bytes) + hlen) % 64;
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  for (int i = 0; i < len_bytes; ++i) out.push_back(static_cast<char>(((hlen + pad) >> (8 * i)) & 0xFF));
  out.append(dict);
  out.append(pad, ' ');
  out.push_back('\n');
  out.append(data);
  return out;
}

std::string f32_bytes(std::initializer_list<uint32_t> bits) {
  std::string out;
  for (uint32_t b : bits) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((b >> (8 * i)) & 0xFF));
  }
  return out;
}

uint32_t bits(double v) { return std::bit_cast<uint32_t>(static_cast<float>(v)); }

// ---- exact bytes ----------------------------------------------------------------------------------------

TEST_F(NpyTest, WritesNumpysExactBytes) {
  // numpy.save(f, numpy.arange(6, dtype='<f4').reshape(2, 3)) with NumPy 1.24 gives exactly these bytes.
  HostTensor t = make({2, 3}, DType::f32, {0, 1, 2, 3, 4, 5});
  ASSERT_TRUE(save_npy(path("t.npy"), t).ok());
  std::string bytes = read("t.npy");
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string expected = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict +
                         std::string(128 - 10 - dict.size() - 1, ' ') + "\n" +
                         f32_bytes({bits(0), bits(1), bits(2), bits(3), bits(4), bits(5)});
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(bytes.size(), 128u + 24u);
  EXPECT_EQ(bytes.find('\n'), 127u);  // the data starts at a multiple of 64 bytes
  EXPECT_EQ(npy_encode(t), expected);
}

TEST_F(NpyTest, HeaderTextForEveryRank) {
  auto header = [](const HostTensor& t) {
    std::string b = npy_encode(t);
    size_t end = b.find('\n');
    EXPECT_EQ((end + 1) % 64, 0u) << b;
    std::string h = b.substr(10, end - 10);
    while (!h.empty() && h.back() == ' ') h.pop_back();
    return h;
  };
  EXPECT_EQ(header(make({5}, DType::f16, {0, 0, 0, 0, 0})),
            "{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }");
  EXPECT_EQ(header(make({}, DType::f32, {1})), "{'descr': '<f4', 'fortran_order': False, 'shape': (), }");
  EXPECT_EQ(header(HostTensor({1, 3, 8, 8}, DType::bf16)),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 8, 8), }");
}

TEST_F(NpyTest, F16AndBf16DataBytes) {
  std::string h = npy_encode(make({3}, DType::f16, {1.0, -2.0, 65504.0}));
  EXPECT_EQ(h.substr(h.size() - 6), std::string("\x00\x3C\x00\xC0\xFF\x7B", 6));
  std::string b = npy_encode(make({2}, DType::bf16, {1.0, -0.5}));  // bf16 is written as exact f32
  EXPECT_EQ(b.substr(b.size() - 8), f32_bytes({0x3F800000u, 0xBF000000u}));
}

// ---- round trips ------------------------------------------------------------------------------------

TEST_F(NpyTest, RoundTripsEveryDtype) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<double> values = {0.0, -0.0, 1.0, -1.5, 0.1, 3.14159, -1e-3, 1e4, inf, -inf, 1e-7, 6e-8};
    for (double& v : values) v = round_to_dtype(v, t);
    HostTensor in = make({2, 2, 3}, t, values);
    std::string file = path(std::string(dtype_name(t)) + ".npy");
    ASSERT_TRUE(save_npy(file, in).ok());
    auto out = load_npy(file, t, in.shape, "x");
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out->shape, in.shape);
    EXPECT_EQ(out->dtype, t);
    ASSERT_EQ(out->data.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(std::bit_cast<uint64_t>(out->data[i]), std::bit_cast<uint64_t>(values[i]))
          << dtype_name(t) << " value " << i << ": " << values[i] << " came back as " << out->data[i];
    }
  }
}

TEST_F(NpyTest, RoundTripsNanAndScalars) {
  HostTensor in = make({}, DType::f32, {std::nan("")});
  ASSERT_TRUE(save_npy(path("s.npy"), in).ok());
  auto out = load_npy(path("s.npy"), DType::f32, Shape{}, "s");
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->data.size(), 1u);
  EXPECT_TRUE(std::isnan(out->data[0]));
}

TEST_F(NpyTest, SaveOverwritesAndLeavesNoTemporaryFiles) {
  ASSERT_TRUE(save_npy(path("x.npy"), make({1}, DType::f32, {1})).ok());
  ASSERT_TRUE(save_npy(path("x.npy"), make({2}, DType::f32, {2, 3})).ok());
  auto out = load_npy(path("x.npy"), DType::f32, Shape{2}, "x");
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->data, (std::vector<double>{2, 3}));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST_F(NpyTest, ReadsVersion2And3) {
  std::string data = f32_bytes({bits(1), bits(2)});
  for (int major : {2, 3}) {
    write("v.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data, major));
    auto out = load_npy(path("v.npy"), DType::f32, Shape{2}, "v");
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out->data, (std::vector<double>{1, 2}));
  }
}

TEST_F(NpyTest, ReadsAnyKeyOrderAndQuoting) {
  write("k.npy",
        npy_file("{\"shape\": (2L,) ,'fortran_order':False,'descr':'<f2'}", std::string("\x00\x3C\x00\xC0", 4)));
  auto out = load_npy(path("k.npy"), DType::f16, Shape{2}, "k");
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->data, (std::vector<double>{1, -2}));
}

TEST_F(NpyTest, Bf16IsRoundedToNearestEvenOnRead) {
  // f32 bit patterns and the bf16 they round to (the upper 16 bits after rounding).
  struct Case {
    uint32_t f32;
    uint16_t bf16;
  };
  const Case cases[] = {
      {0x3F800000u, 0x3F80u},  // 1.0: exact
      {0x3F808000u, 0x3F80u},  // halfway between 0x3F80 and 0x3F81: to even (down)
      {0x3F818000u, 0x3F82u},  // halfway between 0x3F81 and 0x3F82: to even (up)
      {0x3F808001u, 0x3F81u},  // just above halfway: up
      {0x3F807FFFu, 0x3F80u},  // just below halfway: down
      {0xBF818000u, 0xBF82u},  // negative, halfway: to even
      {0x7F7FFFFFu, 0x7F80u},  // largest f32 rounds to infinity
      {0x00000001u, 0x0000u},  // smallest subnormal rounds to zero
  };
  std::initializer_list<uint32_t> raw = {0x3F800000u, 0x3F808000u, 0x3F818000u, 0x3F808001u,
                                         0x3F807FFFu, 0xBF818000u, 0x7F7FFFFFu, 0x00000001u};
  write("b.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (8,), }", f32_bytes(raw)));
  auto out = load_npy(path("b.npy"), DType::bf16, Shape{8}, "b");
  ASSERT_TRUE(out.ok()) << out.status().message();
  for (size_t i = 0; i < std::size(cases); ++i) {
    double want = bf16_bits_to_f32(cases[i].bf16);
    EXPECT_EQ(out->data[i], want) << std::hex << "f32 bits 0x" << cases[i].f32;
  }
  EXPECT_EQ(out->dtype, DType::bf16);
}

// ---- errors -----------------------------------------------------------------------------------------

class NpyErrorTest : public NpyTest {
 protected:
  // Loads `bytes` from a file as tensor 'x', expecting a failure whose message names the file and the tensor;
  // returns the message.
  std::string load_error(std::string_view bytes, DType dtype = DType::f32, Shape shape = Shape{2}) {
    write("x.npy", bytes);
    auto r = load_npy(path("x.npy"), dtype, shape, "x");
    if (r.ok()) return "<loaded>";
    EXPECT_THAT(r.status().message(), HasSubstr(path("x.npy")));
    EXPECT_THAT(r.status().message(), HasSubstr("tensor 'x'"));
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << r.status().message();
    // The in-memory decoder agrees.
    auto d = npy_decode(bytes, dtype, shape, "x", path("x.npy"));
    EXPECT_FALSE(d.ok());
    if (!d.ok()) {
      EXPECT_EQ(d.status().message(), r.status().message());
    }
    return r.status().message();
  }
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string good_data = f32_bytes({bits(1), bits(2)});
};

TEST_F(NpyErrorTest, BadMagic) {
  EXPECT_THAT(load_error("PK\x03\x04 this is a zip file"), HasSubstr("bad magic"));
  EXPECT_THAT(load_error(""), HasSubstr("bad magic"));
  EXPECT_THAT(load_error("\x93NUM"), HasSubstr("bad magic"));
}

TEST_F(NpyErrorTest, UnsupportedVersion) {
  std::string f = npy_file(good_dict, good_data);
  f[6] = 4;
  EXPECT_THAT(load_error(f), HasSubstr("unsupported .npy format version 4.0"));
  f[6] = 1;
  f[7] = 1;
  EXPECT_THAT(load_error(f), HasSubstr("unsupported .npy format version 1.1"));
}

TEST_F(NpyErrorTest, HeaderParseErrors) {
  EXPECT_THAT(load_error(npy_file("not a dict", good_data)), HasSubstr("header parse error"));
  EXPECT_THAT(load_error(npy_file("{'descr': '<f4', 'shape': (2,), }", good_data)),
              HasSubstr("missing key 'fortran_order'"));
  EXPECT_THAT(load_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", good_data)),
              HasSubstr("unexpected key 'x'"));
  EXPECT_THAT(load_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", good_data)),
              HasSubstr("'shape' must be a tuple"));
  EXPECT_THAT(load_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", good_data)),
              HasSubstr("'shape' must be a tuple of non-negative integers"));
  EXPECT_THAT(load_error(npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", good_data)),
              HasSubstr("'fortran_order' must be True or False"));
  EXPECT_THAT(load_error(npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", good_data)),
              HasSubstr("structured dtypes are not supported"));
  EXPECT_THAT(
      load_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", good_data)),
      HasSubstr("too large"));
  EXPECT_THAT(load_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } extra", good_data)),
              HasSubstr("unexpected text after the dict"));
  EXPECT_THAT(load_error(npy_file("{'descr': '\xC3\xA9', 'fortran_order': False, 'shape': (2,), }", good_data)),
              HasSubstr("not ASCII"));
  std::string no_newline = npy_file(good_dict, good_data);
  no_newline[no_newline.find('\n')] = ' ';
  EXPECT_THAT(load_error(no_newline), HasSubstr("does not end with a newline"));
}

TEST_F(NpyErrorTest, WrongElementType) {
  std::string m =
      load_error(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", good_data + good_data));
  EXPECT_THAT(m, HasSubstr("expected '<f4' (float32 for f32), got '<f8' (float64)"));
  m = load_error(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", good_data));
  EXPECT_THAT(m, HasSubstr("got '>f4' (big-endian float32, which is not supported)"));
  m = load_error(npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", good_data));
  EXPECT_THAT(m, HasSubstr("got '<i4' (int32)"));
  m = load_error(npy_file(good_dict, good_data), DType::f16);
  EXPECT_THAT(m, HasSubstr("expected '<f2' (float16 for f16), got '<f4' (float32)"));
  m = load_error(npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", "abcd"), DType::bf16);
  EXPECT_THAT(m, HasSubstr("expected '<f4' (float32 for bf16), got '<f2' (float16)"));
}

TEST_F(NpyErrorTest, FortranOrder) {
  EXPECT_THAT(load_error(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", good_data)),
              HasSubstr("fortran_order is True"));
}

TEST_F(NpyErrorTest, ShapeMismatch) {
  std::string data(4 * 3 * 8 * 4, '\0');
  std::string m = load_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 8), }", data),
                             DType::f32, Shape{1, 3, 8, 8});
  EXPECT_THAT(m, HasSubstr("shape mismatch: expected [1, 3, 8, 8], got [1, 3, 8]"));
  m = load_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", good_data), DType::f32, Shape{2});
  EXPECT_THAT(m, HasSubstr("expected [2], got []"));
}

TEST_F(NpyErrorTest, TruncatedDataAndTrailingJunk) {
  EXPECT_THAT(load_error(npy_file(good_dict, good_data.substr(0, 7))),
              HasSubstr("truncated data: expected 8 bytes after the header, the file holds 7"));
  EXPECT_THAT(load_error(npy_file(good_dict, good_data + "junk")), HasSubstr("4 bytes of trailing junk"));
}

TEST_F(NpyErrorTest, HugeOrTruncatedHeaderLengths) {
  std::string f = npy_file(good_dict, good_data, 2);
  f[8] = f[9] = f[10] = f[11] = '\xFF';  // 4 GiB header
  EXPECT_THAT(load_error(f), HasSubstr("header length 4294967295 bytes exceeds the limit"));
  std::string g = npy_file(good_dict, good_data, 1);
  g[8] = g[9] = '\xFF';  // 65535 bytes: more than the file holds
  EXPECT_THAT(load_error(g), HasSubstr("truncated header"));
  EXPECT_THAT(load_error(std::string("\x93NUMPY\x01\x00\x10", 9)), HasSubstr("ends inside the header length"));
  EXPECT_THAT(load_error(std::string("\x93NUMPY\x01", 7)), HasSubstr("ends inside the version"));
}

TEST_F(NpyErrorTest, NeverCrashesOnTruncationOrCorruption) {
  std::string good = npy_file(good_dict, good_data);
  for (size_t n = 0; n < good.size(); ++n) {
    auto r = npy_decode(std::string_view(good).substr(0, n), DType::f32, Shape{2}, "x");
    EXPECT_FALSE(r.ok()) << "prefix of " << n << " bytes";
  }
  // Every single-byte corruption of the header either fails cleanly or (in padding) still loads.
  for (size_t i = 0; i < 128; ++i) {
    for (int v : {0, 0x7F, 0xFF, int{'('}, int{')'}, int{'\''}, int{','}, int{'}'}}) {
      std::string bad = good;
      bad[i] = static_cast<char>(v);
      auto r = npy_decode(bad, DType::f32, Shape{2}, "x");
      if (r.ok()) {
        EXPECT_EQ(r->data.size(), 2u);
      }
    }
  }
}

TEST_F(NpyTest, MissingFileAndDirectory) {
  auto r = load_npy(path("nope.npy"), DType::f32, Shape{2}, "nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::not_found);
  EXPECT_THAT(r.status().message(), HasSubstr(path("nope.npy")));
  EXPECT_THAT(r.status().message(), HasSubstr("tensor 'nope'"));
  fs::create_directory(path("d.npy"));
  r = load_npy(path("d.npy"), DType::f32, Shape{2}, "d");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("is a directory"));
}

TEST_F(NpyTest, SaveErrors) {
  Status s = save_npy(path("missing-dir/x.npy"), make({1}, DType::f32, {1}));
  EXPECT_EQ(s.code(), StatusCode::io_error);
  EXPECT_THAT(s.message(), HasSubstr("missing-dir/x.npy"));
  s = save_npy(path("x.npy"), make({3}, DType::f32, {1}));
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_THAT(s.message(), HasSubstr("holds 1 values, its shape [3] needs 3"));
}

TEST_F(NpyTest, PathsOfTensors) {
  auto p = npy_path("dir", "conv1.w");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "dir/conv1.w.npy");
  auto nested = npy_path("dir", "grad/conv1.w");  // a training graph's gradient: a subdirectory
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(*nested, "dir/grad/conv1.w.npy");
  for (std::string_view bad : std::vector<std::string_view>{"", ".", "..", "a\\b", std::string_view("a\0b", 3), "/abs",
                                                            "a/", "a//b", "../up", "a/../../b", "a/./b"}) {
    auto r = npy_path("dir", bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), HasSubstr("cannot be used as a file name"));
    }
  }
}

TEST_F(NpyTest, SaveTensorsCreatesTheDirectory) {
  TensorMap m;
  m.emplace("a", make({2}, DType::f16, {1, 2}));
  m.emplace("b", make({1}, DType::bf16, {0.5}));
  m.emplace("grad/b", make({1}, DType::f32, {2}));  // a subdirectory of its own
  std::string sub = path("deep/er");
  ASSERT_TRUE(save_tensors(sub, m).ok());
  EXPECT_TRUE(load_npy(sub + "/grad/b.npy", DType::f32, Shape{1}, "grad/b").ok());
  auto a = load_npy(sub + "/a.npy", DType::f16, Shape{2}, "a");
  auto b = load_npy(sub + "/b.npy", DType::bf16, Shape{1}, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->data, (std::vector<double>{1, 2}));
  EXPECT_EQ(b->data, (std::vector<double>{0.5}));
  write("file", "x");
  EXPECT_FALSE(save_tensors(path("file"), m).ok());
}

TEST_F(NpyTest, LoadInputsOfAGraph) {
  Graph g("g");
  Tensor x = g.input("x", {2, 3}, DType::f16);
  Tensor b = g.parameter("b", {3}, DType::f16);
  g.output(g.add(x, b), "y");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();

  auto missing = load_inputs(path("none"), g);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("directory not found"));

  ASSERT_TRUE(save_npy(path("x.npy"), make({2, 3}, DType::f16, {1, 2, 3, 4, 5, 6})).ok());
  auto r = load_inputs(dir_, g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::not_found);
  EXPECT_THAT(r.status().message(), HasSubstr(path("b.npy") + ": missing file for parameter 'b' ([3] f16)"));

  ASSERT_TRUE(save_npy(path("b.npy"), make({3}, DType::f16, {1, 2, 3})).ok());
  write("unrelated.npy", "ignored");
  r = load_inputs(dir_, g);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->size(), 2u);
  EXPECT_EQ(r->at("b").data, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(r->at("b").dtype, DType::f16);
}

}  // namespace
}  // namespace kiln
