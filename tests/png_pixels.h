// Reading a PNG's pixels in a test (8-bit RGB or RGBA, not interlaced: what rsvg-convert writes), to check
// that a rendered picture shows something and in which colours. zlib inflates the data; the five PNG row
// filters are undone here (the PNG specification, section 9).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace kiln::png {

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgba;  // width * height * 4
  std::string error;          // why it could not be read ("" when it was)
};

inline uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint32_t(uint8_t(s[at + 3]));
}

inline Image decode(const std::string& file) {
  Image img;
  if (file.size() < 8 || file.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return img.error = "not a PNG", img;
  std::string idat;
  int colour = -1, depth = 0;
  for (size_t at = 8; at + 12 <= file.size();) {
    const uint32_t len = be32(file, at);
    const std::string type = file.substr(at + 4, 4);
    if (at + 12 + len > file.size()) return img.error = "truncated chunk " + type, img;
    if (type == "IHDR") {
      img.width = be32(file, at + 8), img.height = be32(file, at + 12);
      depth = uint8_t(file[at + 16]), colour = uint8_t(file[at + 17]);
      if (uint8_t(file[at + 20]) != 0) return img.error = "interlaced", img;
    } else if (type == "IDAT") {
      idat += file.substr(at + 8, len);
    }
    at += 12 + len;
  }
  if (depth != 8 || (colour != 2 && colour != 6)) return img.error = "not 8-bit RGB(A)", img;
  const size_t channels = colour == 6 ? 4 : 3, stride = img.width * channels;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_size != raw.size())
    return img.error = "bad image data", img;
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  img.rgba.resize(size_t{img.width} * img.height * 4);
  for (uint32_t y = 0; y < img.height; ++y) {
    const uint8_t* row = &raw[y * (stride + 1)];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= channels ? cur[i - channels] : 0, b = prev[i], c = i >= channels ? prev[i - channels] : 0;
      int pred = 0;
      switch (row[0]) {
        case 0: pred = 0; break;
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: return img.error = "bad row filter", img;
      }
      cur[i] = uint8_t(row[1 + i] + pred);
    }
    for (uint32_t x = 0; x < img.width; ++x) {
      uint8_t* px = &img.rgba[(size_t{y} * img.width + x) * 4];
      for (size_t ch = 0; ch < 3; ++ch) px[ch] = cur[x * channels + ch];
      px[3] = channels == 4 ? cur[x * channels + 3] : 255;
    }
    prev.swap(cur);
  }
  return img;
}

// Pixels drawn in something other than white (or transparent), and pixels within `tol` of a colour.
inline size_t inked(const Image& img) {
  size_t n = 0;
  for (size_t i = 0; i + 3 < img.rgba.size(); i += 4) {
    const bool white = img.rgba[i] > 245 && img.rgba[i + 1] > 245 && img.rgba[i + 2] > 245;
    n += img.rgba[i + 3] > 0 && !white;
  }
  return n;
}
inline size_t of_colour(const Image& img, uint32_t rgb, int tol = 12) {
  size_t n = 0;
  const int r = int(rgb >> 16), g = int(rgb >> 8 & 0xff), b = int(rgb & 0xff);
  for (size_t i = 0; i + 3 < img.rgba.size(); i += 4) {
    n += std::abs(img.rgba[i] - r) <= tol && std::abs(img.rgba[i + 1] - g) <= tol &&
         std::abs(img.rgba[i + 2] - b) <= tol;
  }
  return n;
}

}  // namespace kiln::png
