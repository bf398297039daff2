#pragma once
// Hand-built .kiln artifacts for the loader/executor tests and the broken-file corpus: the
// FlatBuffers tables are written directly (no MLIR), so the runtime is tested on its own.

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kiln_generated.h"

namespace kiln::testing {

struct SlotSpec {
  fb::SlotKind kind = fb::SlotKind::Arena;
  fb::DType dtype = fb::DType::Float32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint32_t weight = 0;
};
struct AttrSpecT {
  std::string name;
  fb::AttrKind kind = fb::AttrKind::Int;
  int64_t i = 0;
  double f = 0;
  std::vector<int64_t> ints;
};
struct InstrSpec {
  std::string kernel;
  std::vector<int32_t> inputs, outputs;
  std::vector<AttrSpecT> attrs;
  std::string symbol;
  // Control instructions (kernel and symbol empty).
  fb::Control control = fb::Control::None;
  uint32_t body_size = 0, else_size = 0;
  std::vector<int32_t> yields, else_yields, carried;
  int32_t counter = -1;
  int64_t begin = 0, end = 0, step = 1;
  std::string block_epilogue, block_prologue;  // Generated: its block forms (kiln.fbs)
};

struct CodeSpec {
  std::string triple;
  uint32_t blob = 0;
  std::vector<std::string> symbols;
  std::vector<std::string> features, imports;
};

struct ArtifactSpec {
  uint32_t version = 1;
  std::string name = "test";
  std::string target_triple;
  std::vector<std::string> cpu_features;
  std::vector<SlotSpec> slots;
  std::vector<InstrSpec> instrs;
  std::vector<std::pair<std::string, uint32_t>> inputs, outputs;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> blobs;
  std::vector<std::pair<uint32_t, uint32_t>> state;  // (value slot, weight)
  uint64_t arena_bytes = 0;
  std::vector<CodeSpec> code;
  std::vector<size_t> splat_slots;  // weight slots whose blob holds one element

  std::vector<uint8_t> build() const {
    flatbuffers::FlatBufferBuilder b;
    std::vector<flatbuffers::Offset<fb::Slot>> slots;
    for (size_t i = 0; i < this->slots.size(); ++i) {
      const SlotSpec& s = this->slots[i];
      const bool splat = std::find(splat_slots.begin(), splat_slots.end(), i) != splat_slots.end();
      slots.push_back(
          fb::CreateSlotDirect(b, s.kind, s.dtype, &s.shape, s.offset, s.weight, splat));
    }
    std::vector<flatbuffers::Offset<fb::Instruction>> instrs;
    auto list = [](const std::vector<int32_t>& v) { return v.empty() ? nullptr : &v; };
    for (const InstrSpec& in : this->instrs) {
      std::vector<flatbuffers::Offset<fb::Attr>> attrs;
      for (const AttrSpecT& a : in.attrs) {
        attrs.push_back(fb::CreateAttrDirect(b, a.name.c_str(), a.kind, a.i, a.f,
                                             a.kind == fb::AttrKind::Ints ? &a.ints : nullptr));
      }
      instrs.push_back(fb::CreateInstructionDirect(
          b, in.kernel.empty() ? nullptr : in.kernel.c_str(),
          in.symbol.empty() ? nullptr : in.symbol.c_str(), &attrs, &in.inputs, &in.outputs,
          in.control, in.body_size, in.else_size, list(in.yields), list(in.else_yields),
          list(in.carried), in.counter, in.begin, in.end, in.step,
          in.block_epilogue.empty() ? nullptr : in.block_epilogue.c_str(),
          in.block_prologue.empty() ? nullptr : in.block_prologue.c_str()));
    }
    auto io = [&](const std::vector<std::pair<std::string, uint32_t>>& v) {
      std::vector<flatbuffers::Offset<fb::Io>> out;
      for (const auto& [n, s] : v) out.push_back(fb::CreateIoDirect(b, n.c_str(), s));
      return out;
    };
    auto ins = io(inputs), outs = io(outputs);
    std::vector<uint8_t> segment;
    std::vector<flatbuffers::Offset<fb::Blob>> blobs;
    for (const auto& [n, bytes] : this->blobs) {
      const uint64_t off = (segment.size() + 63) / 64 * 64;
      segment.resize(off + bytes.size());
      if (!bytes.empty()) std::memcpy(segment.data() + off, bytes.data(), bytes.size());
      blobs.push_back(fb::CreateBlobDirect(b, n.c_str(), off, bytes.size()));
    }
    std::vector<flatbuffers::Offset<fb::StateUpdate>> state;
    for (const auto& [v, w] : this->state) state.push_back(fb::CreateStateUpdate(b, v, w));
    std::vector<flatbuffers::Offset<flatbuffers::String>> feats;
    for (const auto& f : cpu_features) feats.push_back(b.CreateString(f));
    std::vector<flatbuffers::Offset<fb::CodeObject>> code;
    for (const CodeSpec& c : this->code) {
      auto strings = [&](const std::vector<std::string>& v) {
        std::vector<flatbuffers::Offset<flatbuffers::String>> out;
        for (const auto& s : v) out.push_back(b.CreateString(s));
        return out;
      };
      auto syms = strings(c.symbols), feats = strings(c.features), imports = strings(c.imports);
      code.push_back(fb::CreateCodeObjectDirect(b, c.triple.c_str(), &feats, c.blob, &syms,
                                                c.imports.empty() ? nullptr : &imports));
    }
    auto root =
        fb::CreateModelDirect(b, version, name.c_str(), "test", target_triple.c_str(), &feats, &ins,
                              &outs, &slots, &instrs, arena_bytes, 0, &blobs, &state, &code);
    b.FinishSizePrefixed(root, fb::ModelIdentifier());
    std::vector<uint8_t> file(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
    file.resize((file.size() + 63) / 64 * 64, 0);
    file.insert(file.end(), segment.begin(), segment.end());
    return file;
  }
};

// n floats uniform in [-1, 1), seeded.
inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// y = relu(x W^T + b): x [2,3] input, W [4,3] and b [4] weights, y [2,4] output.
inline ArtifactSpec linear_relu_spec(const std::vector<float>& w, const std::vector<float>& bias) {
  ArtifactSpec a;
  a.blobs = {{"fc.weight", bytes_of(w)}, {"fc.bias", bytes_of(bias)}};
  a.slots = {
      {fb::SlotKind::Arena, fb::DType::Float32, {2, 3}, 0, 0},   // 0: x
      {fb::SlotKind::Weight, fb::DType::Float32, {4, 3}, 0, 0},  // 1: W
      {fb::SlotKind::Weight, fb::DType::Float32, {4}, 0, 1},     // 2: b
      {fb::SlotKind::Arena, fb::DType::Float32, {2, 4}, 64, 0},  // 3: x W^T + b
      {fb::SlotKind::Arena, fb::DType::Float32, {2, 4}, 64, 0},  // 4: relu, in place
  };
  a.instrs = {{"linear", {0, 1, 2}, {3}, {}}, {"relu", {3}, {4}, {}}};
  a.inputs = {{"x", 0}};
  a.outputs = {{"y", 4}};
  a.arena_bytes = 128;
  return a;
}

// Control flow: y = (p ? relu(x) : -x), then z = y * 2^3 by a loop of three z = z + z.
//   x [4] and p (bool, 0-dim) inputs; y and z outputs.
inline ArtifactSpec control_flow_spec() {
  ArtifactSpec a;
  a.version = 2;
  a.slots = {
      {fb::SlotKind::Arena, fb::DType::Float32, {4}, 0, 0},    // 0: x
      {fb::SlotKind::Arena, fb::DType::Bool, {}, 64, 0},       // 1: p
      {fb::SlotKind::Arena, fb::DType::Float32, {4}, 128, 0},  // 2: y
      {fb::SlotKind::Arena, fb::DType::Float32, {4}, 192, 0},  // 3: relu(x)
      {fb::SlotKind::Arena, fb::DType::Float32, {4}, 256, 0},  // 4: -x
      {fb::SlotKind::Arena, fb::DType::Float32, {4}, 320, 0},  // 5: carried z
      {fb::SlotKind::Arena, fb::DType::Float32, {4}, 384, 0},  // 6: z + z
      {fb::SlotKind::Arena, fb::DType::Float32, {4}, 448, 0},  // 7: the loop's result
      {fb::SlotKind::Arena, fb::DType::Int64, {}, 512, 0},     // 8: counter
  };
  InstrSpec branch;
  branch.control = fb::Control::If;
  branch.inputs = {1};
  branch.outputs = {2};
  branch.body_size = 1;
  branch.else_size = 1;
  branch.yields = {3};
  branch.else_yields = {4};
  InstrSpec loop;
  loop.control = fb::Control::For;
  loop.inputs = {2};
  loop.outputs = {7};
  loop.carried = {5};
  loop.yields = {6};
  loop.counter = 8;
  loop.body_size = 1;
  loop.end = 3;
  a.instrs = {
      branch, {"relu", {0}, {3}, {}}, {"neg", {0}, {4}, {}}, loop, {"add", {5, 5}, {6}, {}}};
  a.inputs = {{"x", 0}, {"p", 1}};
  a.outputs = {{"y", 2}, {"z", 7}};
  a.arena_bytes = 520;
  return a;
}

}  // namespace kiln::testing
