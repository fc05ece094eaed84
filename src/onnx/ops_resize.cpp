// ONNX's Resize and Upsample as kiln's upsample2d.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "importer.h"

namespace kiln::onnx_import {
namespace {

// Resize (opset 10+) and Upsample (7-9) in the cases kiln's upsample2d computes exactly: nearest with
// floor indexing (asymmetric + floor, or an integer upscale, where half_pixel rounding gives the same
// source pixel), and bilinear with half_pixel / pytorch_half_pixel (align_corners false) or align_corners.
Status resize(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  const Shape s = imp.g.shape(x);
  if (s.rank() != 4)
    return imp.refuse(n, fmt::format("a rank-{} input: kiln resizes 4-D [N, C, H, W] tensors", s.rank()));
  const bool upsample = n.op_type() == "Upsample";
  const std::string mode = attr_string(n, "mode", "nearest");
  std::string coord =
      upsample || imp.opset() < 11 ? "asymmetric" : attr_string(n, "coordinate_transformation_mode", "half_pixel");
  const std::string nearest_mode =
      upsample || imp.opset() < 11 ? "floor" : attr_string(n, "nearest_mode", "round_prefer_floor");
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  if (upsample && imp.opset() < 9) {
    scales = attr_floats(n, "scales");
  } else {
    const int scales_at = upsample || imp.opset() < 11 ? 1 : 2;
    if (Importer::has_input(n, scales_at)) {
      KILN_ASSIGN_OR_RETURN(const Const* c, imp.const_input(n, scales_at, "scales"));
      for (size_t i = 0; i < static_cast<size_t>(c->numel()); ++i) scales.push_back(c->at(i));
    }
    if (!upsample && imp.opset() >= 11 && Importer::has_input(n, 3)) {
      KILN_ASSIGN_OR_RETURN(const Const* c, imp.const_input(n, 3, "sizes", true));
      sizes = c->ints;
    }
  }
  if (!sizes.empty()) {
    if (sizes.size() != 4 || sizes[0] != s[0] || sizes[1] != s[1]) return imp.refuse(n, "only H and W may be resized");
  } else {
    if (scales.size() != 4) return imp.error(n, fmt::format("scales has {} values, expected 4", scales.size()));
    for (double v : scales) {
      if (!(v > 0 && v <= 1e6)) return imp.error(n, fmt::format("scale {} is not a positive finite number", v));
    }
    if (scales[0] != 1 || scales[1] != 1)
      return imp.refuse(n, "only H and W may be resized (scales of N and C must be 1)");
  }
  if (attr_string(n, "coordinate_transformation_mode", "") == "tf_crop_and_resize") {
    return imp.refuse(n, "coordinate_transformation_mode tf_crop_and_resize is not supported");
  }
  Upsample2dOptions o;
  if (!sizes.empty()) {
    o.size = {sizes[2], sizes[3]};
  } else {
    o.scale = {scales[2], scales[3]};
  }
  auto out_dim_is_one = [&] {
    for (int i = 0; i < 2; ++i) {
      const int64_t out =
          sizes.empty()
              ? static_cast<int64_t>(std::floor(static_cast<double>(s[2 + i]) * scales[static_cast<size_t>(2 + i)]))
              : sizes[static_cast<size_t>(2 + i)];
      if (out == 1 && s[2 + i] > 1) return true;
    }
    return false;
  };
  if (mode == "nearest") {
    bool integer_up = true;
    for (int i = 0; i < 2; ++i) {
      const double r = sizes.empty()
                           ? scales[static_cast<size_t>(2 + i)]
                           : static_cast<double>(sizes[static_cast<size_t>(2 + i)]) / static_cast<double>(s[2 + i]);
      integer_up = integer_up && r >= 1 && r <= 1 << 20 && r == std::floor(r);
    }
    // Before opset 11 the references disagree on rounding for fractional scales (ONNX's Resize-10 data
    // rounds, ONNX Runtime takes the ceiling when downsampling): only integer upscales, where all agree.
    const bool floor_asym = coord == "asymmetric" && nearest_mode == "floor" && (imp.opset() >= 11 || integer_up);
    const bool round_half = (coord == "half_pixel" || coord == "pytorch_half_pixel") &&
                            (nearest_mode == "round_prefer_floor" || nearest_mode == "round_prefer_ceil");
    if (!(floor_asym || (integer_up && round_half))) {
      return imp.refuse(n, fmt::format("nearest resize with coordinate_transformation_mode '{}' and nearest_mode '{}' "
                                       "(kiln's nearest is floor(dst / scale))",
                                       coord, nearest_mode));
    }
    o.mode = "nearest";
  } else if (mode == "linear" || mode == "bilinear") {
    if (coord == "align_corners") {
      o.align_corners = true;
    } else if (coord == "pytorch_half_pixel" && out_dim_is_one()) {
      // pytorch_half_pixel samples coordinate 0 for an output of length 1; half_pixel (kiln's) the centre.
      return imp.refuse(n, "linear resize with pytorch_half_pixel to an output dim of 1");
    } else if (coord != "half_pixel" && coord != "pytorch_half_pixel") {
      return imp.refuse(n, fmt::format("linear resize with coordinate_transformation_mode '{}' (kiln computes "
                                       "half_pixel and align_corners)",
                                       coord));
    }
    o.mode = "bilinear";
  } else {
    return imp.refuse(n, fmt::format("mode '{}' (kiln resizes nearest and linear)", mode));
  }
  return imp.set_output(n, 0, imp.g.upsample2d(x, o, imp.node_name(n)));
}

}  // namespace

void add_resize_handlers(HandlerTable& t) {
  t["Resize"] = resize;
  t["Upsample"] = resize;
}

}  // namespace kiln::onnx_import
