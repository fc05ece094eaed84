// Small ONNX models written with ONNX's own protobuf classes, for the importer's tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace kiln::testing {

class OnnxModel {
 public:
  explicit OnnxModel(int opset = 13) {
    m_.set_ir_version(8);
    m_.set_producer_name("kiln-tests");
    auto* o = m_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m_.mutable_graph()->set_name("test");
  }
  // An f32 input; a negative dim is symbolic ("N").
  OnnxModel& input(const std::string& name, const std::vector<int64_t>& dims) {
    value_info(m_.mutable_graph()->add_input(), name, dims);
    return *this;
  }
  // An f32 output (ONNX's checker wants its shape; a negative dim is symbolic).
  OnnxModel& output(const std::string& name, const std::vector<int64_t>& dims) {
    value_info(m_.mutable_graph()->add_output(), name, dims);
    return *this;
  }
  // An f32 initializer with random values in [-1, 1] (seeded by its name), or the values given.
  onnx::TensorProto& weight(const std::string& name, const std::vector<int64_t>& dims, std::vector<float> values = {}) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    if (values.empty()) {
      std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(name)));
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (int64_t i = 0; i < n; ++i) values.push_back(u(rng));
    }
    for (float v : values) t->add_float_data(v);
    return *t;
  }
  onnx::TensorProto& int_weight(const std::string& name, const std::vector<int64_t>& values) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return *t;
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = {}) {
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }
  static void attr(onnx::NodeProto& n, const std::string& name, std::vector<int64_t> ints) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : ints) a->add_ints(v);
  }
  static void attr(onnx::NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_f(onnx::NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr_s(onnx::NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  std::string bytes() const { return m_.SerializeAsString(); }
  onnx::ModelProto& proto() { return m_; }

 private:
  static void value_info(onnx::ValueInfoProto* vi, const std::string& name, const std::vector<int64_t>& dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = shape->add_dim();
      if (d < 0) {
        dim->set_dim_param("N");
      } else {
        dim->set_dim_value(d);
      }
    }
  }
  onnx::ModelProto m_;
};

}  // namespace kiln::testing
