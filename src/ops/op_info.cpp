// op_infos (include/kiln/op_info.h): the registry's rows as front ends see them.
#include "kiln/op_info.h"

#include "ops/registry.h"

namespace kiln {

const std::vector<OpInfo>& op_infos() {
  static const std::vector<OpInfo> infos = [] {
    std::vector<OpInfo> r;
    for (const OpDef& d : op_registry()) {
      OpInfo i{.id = d.id, .name = d.name, .summary = d.summary, .onnx = d.onnx};
      for (const PortSpec& p : d.inputs) i.inputs.push_back({p.name, p.optional, p.list, p.scalar_attr});
      for (const PortSpec& p : d.outputs) i.outputs.push_back({p.name, p.optional, p.list, p.scalar_attr});
      for (const AttrSpec& a : d.attrs) {
        i.attrs.push_back({a.name, attr_type_name(a.type), a.default_value, a.optional, a.choices});
      }
      r.push_back(std::move(i));
    }
    return r;
  }();
  return infos;
}

}  // namespace kiln
