// Loading a graph from JSON: reading /nodes (op, name, inputs, outputs, attributes; see json_loader.h).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "json/json_attr_values.h"
#include "json/json_loader.h"
#include "json/json_messages.h"
#include "json/json_util.h"
#include "ops/registry.h"

namespace kiln::json_detail {

std::vector<NodeSpec> Loader::read_nodes(const json& list) {
  static const std::vector<std::string_view> keys{"op", "name", "inputs", "outputs", "attrs"};
  std::vector<NodeSpec> specs(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& n = list[i];
    NodeSpec& spec = specs[i];
    const std::string path = fmt::format("/nodes/{}", i);
    auto fail = [&](std::string field, std::string p, std::string msg) {
      node_problem(i, std::move(field), std::move(p), std::move(msg));
      spec.broken = true;
    };
    if (!n.is_object()) {
      fail("", path,
           fmt::format("expected a node {{\"op\", \"name\", \"inputs\", \"outputs\", \"attrs\"}}, got {}", shown(n)));
      suppress_.insert({static_cast<int32_t>(i), "op"});
      continue;
    }
    for (const auto& [key, value] : n.items()) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        node_problem(i, "", fmt::format("{}/{}", path, pointer_token(key)),
                     fmt::format("unknown key '{}'; valid keys: {}", key, quoted_list(keys)));
      }
    }
    auto op = n.find("op");
    if (op == n.end() || !op->is_string()) {
      fail("op", path + "/op",
           op == n.end() ? "missing key 'op' (the op's name, such as \"conv2d\")"
                         : fmt::format("expected the op's name (a string), got {}", shown(*op)));
      suppress_.insert({static_cast<int32_t>(i), "op"});
    } else {
      spec.op = op->get<std::string>();
    }
    const OpDef* def = find_op(spec.op);
    if (auto nm = n.find("name"); nm != n.end()) {
      if (!nm->is_string() || nm->get_ref<const std::string&>().empty()) {
        fail("name", path + "/name", fmt::format("expected the node's name (a non-empty string), got {}", shown(*nm)));
      } else {
        spec.name = nm->get<std::string>();
      }
    }
    read_node_inputs(n, i, spec);
    read_node_outputs(n, i, spec);
    if (auto a = n.find("attrs"); a != n.end()) {
      if (!a->is_object()) {
        fail("attrs", path + "/attrs", fmt::format("expected an object {{attribute: value}}, got {}", shown(*a)));
      } else {
        for (const auto& [key, value] : a->items()) {
          std::string why, where;
          auto v = to_attr_value(value, &why, &where);
          const AttrSpec* as = def ? def->attr(key) : nullptr;
          if (v && (!as || json_kind_fits(*as, value))) {
            spec.attrs[key] = std::move(*v);
            continue;
          }
          // A value of the wrong JSON kind is shown as written (2.0, not 2); list lengths and string
          // choices are left to the registry's check.
          if (as && (v || where.empty())) {
            why = fmt::format("expected {}, got {}", describe_attr_spec(*as), shown(value));
            where.clear();
          }
          fail("attrs/" + key, fmt::format("{}/attrs/{}{}", path, pointer_token(key), where),
               fmt::format("attribute '{}': {}", key, why));
          suppress_.insert({static_cast<int32_t>(i), "attrs/" + key});  // not "missing" as well
        }
      }
    }
    for (const auto& [port, tname] : spec.outputs) producer_.emplace(tname, static_cast<int32_t>(i));
  }
  return specs;
}

void Loader::read_node_inputs(const json& n, size_t i, NodeSpec& spec) {
  const std::string path = fmt::format("/nodes/{}/inputs", i);
  auto fail = [&](std::string field, std::string p, std::string msg) {
    node_problem(i, std::move(field), std::move(p), std::move(msg));
    spec.broken = true;
  };
  auto in = n.find("inputs");
  if (in == n.end() || !in->is_object()) {
    fail("inputs", path,
         in == n.end() ? "missing key 'inputs' (an object {port: tensor name})"
                       : fmt::format("expected an object {{port: tensor name}}, got {}", shown(*in)));
    suppress_inputs_.insert(static_cast<int32_t>(i));  // every port is missing: reported once, here
    return;
  }
  for (const auto& [port, value] : in->items()) {
    PortRefs refs{port, {}, true};
    const std::string field = "inputs/" + port;
    const std::string ppath = fmt::format("{}/{}", path, pointer_token(port));
    auto bad_name = [&](const json& v, std::string suffix) {
      fail(field, ppath + suffix, fmt::format("expected a tensor name (a non-empty string), got {}", shown(v)));
      refs.ok = false;
    };
    if (value.is_string()) {
      if (value.get_ref<const std::string&>().empty()) {
        bad_name(value, "");
      } else {
        refs.refs.push_back({value.get<std::string>(), ""});
      }
    } else if (value.is_array()) {
      for (size_t k = 0; k < value.size(); ++k) {
        const json& e = value[k];
        if (!e.is_string() || e.get_ref<const std::string&>().empty()) {
          bad_name(e, fmt::format("/{}", k));
        } else {
          refs.refs.push_back({e.get<std::string>(), fmt::format("/{}", k)});
        }
      }
    } else {
      std::string hint =
          value.is_number()
              ? fmt::format("; a constant operand is an attribute: \"attrs\": {{\"{}\": {}}}", port, shown(value))
              : "";
      fail(field, ppath, fmt::format("expected a tensor name or a list of tensor names, got {}{}", shown(value), hint));
      refs.ok = false;
    }
    if (!refs.ok) suppress_.insert({static_cast<int32_t>(i), field});
    spec.inputs.push_back(std::move(refs));
  }
}

void Loader::read_node_outputs(const json& n, size_t i, NodeSpec& spec) {
  const std::string path = fmt::format("/nodes/{}/outputs", i);
  auto out = n.find("outputs");
  if (out == n.end() || !out->is_object()) {
    node_problem(i, "outputs", path,
                 out == n.end() ? "missing key 'outputs' (an object {port: tensor name}, such as {\"y\": \"t1\"})"
                                : fmt::format("expected an object {{port: tensor name}}, got {}", shown(*out)));
    spec.broken = true;
    outputs_unreadable_ = true;
    return;
  }
  spec.outputs_read = true;
  for (const auto& [port, value] : out->items()) {
    if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
      node_problem(i, "outputs/" + port, fmt::format("{}/{}", path, pointer_token(port)),
                   fmt::format("expected a tensor name (a non-empty string), got {}", shown(value)));
      spec.broken = true;
      outputs_unreadable_ = true;
      continue;
    }
    spec.outputs.emplace_back(port, value.get<std::string>());
  }
}

}  // namespace kiln::json_detail
