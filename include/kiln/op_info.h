// The op registry as front ends see it: every op's ports and attributes, read from its registry row, for
// whatever builds graphs generically or checks that it names ops rightly (Python's kiln.ops(), the torch
// exporter's test, documentation). One row per op of KILN_OPS, in that order.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/ops.h"

namespace kiln {

struct OpPortInfo {
  std::string_view name;
  bool optional = false;
  bool list = false;         // any number of tensors (concat's xs)
  bool scalar_attr = false;  // may instead be a float attribute of the same name (binary ops' a or b)
};

struct OpAttrInfo {
  std::string_view name;
  std::string_view type;                    // "int", "float", "bool", "string", "int list", "float list"
  std::optional<AttrValue> default_value;   // nullopt: required unless optional
  bool optional = false;                    // may be absent with no default
  std::vector<std::string_view> choices{};  // a string attribute's allowed values
};

struct OpInfo {
  OpId id{};
  std::string_view name, summary;
  std::string_view onnx;  // the ONNX op that is this one one to one, or ""
  std::vector<OpPortInfo> inputs{}, outputs{};
  std::vector<OpAttrInfo> attrs{};
};

const std::vector<OpInfo>& op_infos();

}  // namespace kiln
