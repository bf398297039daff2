// Writes the artifact corpora: valid seeds (fuzz/corpus/, also replayed by CTest) and
// deliberately broken files (tests/data/artifact_corpus/broken/), each named for its defect.
//   kiln_make_artifact_corpus SEED_DIR BROKEN_DIR

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "runtime/artifact_builder.h"

using kiln::testing::ArtifactSpec;
namespace fb = kiln::fb;

namespace {

void write(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
}

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
  return v;
}

ArtifactSpec linear_relu() {
  return kiln::testing::linear_relu_spec(ramp(12), ramp(4));
}

// conv2d -> max_pool2d -> view -> softmax: a seed that reaches more kernels.
ArtifactSpec conv_net() {
  using K = fb::AttrKind;
  ArtifactSpec a;
  a.blobs = {{"conv.weight", kiln::testing::bytes_of(ramp(2 * 1 * 3 * 3))},
             {"conv.bias", kiln::testing::bytes_of(ramp(2))}};
  a.slots = {
      {fb::SlotKind::Arena, fb::DType::Float32, {1, 1, 6, 6}, 0, 0},    // 0 x
      {fb::SlotKind::Weight, fb::DType::Float32, {2, 1, 3, 3}, 0, 0},   // 1 w
      {fb::SlotKind::Weight, fb::DType::Float32, {2}, 0, 1},            // 2 b
      {fb::SlotKind::Arena, fb::DType::Float32, {1, 2, 6, 6}, 192, 0},  // 3 conv
      {fb::SlotKind::Arena, fb::DType::Float32, {1, 2, 3, 3}, 512, 0},  // 4 pool
      {fb::SlotKind::Arena, fb::DType::Int64, {1, 2, 3, 3}, 640, 0},    // 5 indices
      {fb::SlotKind::Arena, fb::DType::Float32, {1, 18}, 512, 0},       // 6 view
      {fb::SlotKind::Arena, fb::DType::Float32, {1, 18}, 0, 0},         // 7 softmax
  };
  a.instrs = {
      {"conv2d",
       {0, 1, 2},
       {3},
       {{"stride", K::Ints, 0, 0, {1, 1}},
        {"padding", K::Ints, 0, 0, {1, 1}},
        {"dilation", K::Ints, 0, 0, {1, 1}},
        {"groups", K::Int, 1}}},
      {"max_pool2d",
       {3},
       {4, 5},
       {{"kernel", K::Ints, 0, 0, {2, 2}},
        {"stride", K::Ints, 0, 0, {2, 2}},
        {"padding", K::Ints, 0, 0, {0, 0}},
        {"dilation", K::Ints, 0, 0, {1, 1}}}},
      {"view", {4}, {6}, {{"shape", K::Ints, 0, 0, {1, 18}}}},
      {"softmax", {6}, {7}, {{"dim", K::Int, 1}}},
  };
  a.inputs = {{"x", 0}};
  a.outputs = {{"probs", 7}};
  a.arena_bytes = 832;
  return a;
}

// Many kernels on small shapes (embedding, layer_norm, transpose, matmul, softmax, cat, mean,
// batch_norm, gelu, clamp, argmax), so mutations reach their attribute decoders and checks.
ArtifactSpec mixed_ops() {
  using K = fb::AttrKind;
  using S = fb::SlotKind;
  using D = fb::DType;
  ArtifactSpec a;
  a.blobs = {{"emb", kiln::testing::bytes_of(ramp(20))},
             {"ln.w", kiln::testing::bytes_of(ramp(4))},
             {"ln.b", kiln::testing::bytes_of(ramp(4))},
             {"bn.rm", kiln::testing::bytes_of(std::vector<float>(4, 0.1f))},
             {"bn.rv", kiln::testing::bytes_of(std::vector<float>(4, 2.0f))}};
  uint64_t off = 0;
  auto arena = [&](D d, std::vector<int64_t> shape) {
    kiln::testing::SlotSpec s{S::Arena, d, shape, off, 0};
    int64_t n = 1;
    for (int64_t v : shape) n *= v;
    off += (static_cast<uint64_t>(n) * 8 + 63) / 64 * 64;
    a.slots.push_back(s);
    return static_cast<int32_t>(a.slots.size() - 1);
  };
  auto weight = [&](uint32_t blob, std::vector<int64_t> shape) {
    a.slots.push_back({S::Weight, D::Float32, shape, 0, blob});
    return static_cast<int32_t>(a.slots.size() - 1);
  };
  const int32_t x = arena(D::Float32, {2, 4}), tok = arena(D::Int64, {2});
  const int32_t emb = weight(0, {5, 4}), lw = weight(1, {4}), lb = weight(2, {4});
  const int32_t rm = weight(3, {4}), rv = weight(4, {4});
  const int32_t e = arena(D::Float32, {2, 4}), sum = arena(D::Float32, {2, 4});
  const int32_t ln = arena(D::Float32, {2, 4}), tr = arena(D::Float32, {4, 2});
  const int32_t mm = arena(D::Float32, {2, 2}), sm = arena(D::Float32, {2, 2});
  const int32_t cat = arena(D::Float32, {4, 2}), mean = arena(D::Float32, {4});
  const int32_t bn = arena(D::Float32, {2, 4}), ge = arena(D::Float32, {2, 4});
  const int32_t cl = arena(D::Float32, {2, 4}), am = arena(D::Int64, {2});
  a.instrs = {
      {"embedding", {emb, tok}, {e}, {}},
      {"add", {x, e}, {sum}, {{"alpha", K::Float, 0, 1.0}}},
      {"layer_norm",
       {sum, lw, lb},
       {ln},
       {{"normalized_shape", K::Ints, 0, 0, {4}}, {"eps", K::Float, 0, 1e-5}}},
      {"transpose", {ln}, {tr}, {{"dim0", K::Int, 0}, {"dim1", K::Int, 1}}},
      {"matmul", {ln, tr}, {mm}, {}},
      {"softmax", {mm}, {sm}, {{"dim", K::Int, 1}}},
      {"cat", {sm, sm}, {cat}, {{"dim", K::Int, 0}}},
      {"mean", {cat}, {mean}, {{"dims", K::Ints, 0, 0, {1}}, {"keepdim", K::Bool, 0}}},
      {"batch_norm",
       {x, rm, rv, lw, lb},
       {bn},
       {{"training", K::Bool, 0}, {"momentum", K::Float, 0, 0.1}, {"eps", K::Float, 0, 1e-5}}},
      {"gelu", {bn}, {ge}, {{"approximate", K::Bool, 1}}},
      {"clamp", {ge}, {cl}, {{"min", K::Float, 0, -0.5}, {"max", K::Float, 0, 0.5}}},
      {"argmax", {cl}, {am}, {{"dim", K::Int, 1}, {"keepdim", K::Bool, 0}}},
  };
  a.inputs = {{"x", static_cast<uint32_t>(x)}, {"tokens", static_cast<uint32_t>(tok)}};
  a.outputs = {{"mean", static_cast<uint32_t>(mean)},
               {"argmax", static_cast<uint32_t>(am)},
               {"clamped", static_cast<uint32_t>(cl)}};
  a.arena_bytes = off;
  return a;
}

// The prepared conv paths (weights packed or transformed once per model): a 3x3 stride-1 conv with
// enough 4x4 tiles for Winograd, an inverted-residual block (mbconv: expand, depthwise stride 2,
// project), and a 3x3 stride-2 conv with 9 output positions and 96 channels (output channels
// across the vector lanes), also as a conv2d_avgpool (the same conv, relu6, averaged).
ArtifactSpec conv_blocks() {
  using K = fb::AttrKind;
  using S = fb::SlotKind;
  using D = fb::DType;
  ArtifactSpec a;
  const std::vector<std::pair<std::string, size_t>> blobs = {
      {"w1", 8 * 8 * 9}, {"b1", 8},      {"we", 24 * 8}, {"be", 24},         {"wd", 24 * 9},
      {"bd", 24},        {"wp", 8 * 24}, {"bp", 8},      {"w3", 96 * 8 * 9}, {"b3", 96}};
  for (const auto& [name, n] : blobs) a.blobs.push_back({name, kiln::testing::bytes_of(ramp(n))});
  a.slots = {
      {S::Arena, D::Float32, {1, 8, 16, 16}, 0, 0},     // 0 x
      {S::Weight, D::Float32, {8, 8, 3, 3}, 0, 0},      // 1 w1
      {S::Weight, D::Float32, {8}, 0, 1},               // 2 b1
      {S::Arena, D::Float32, {1, 8, 16, 16}, 8192, 0},  // 3 c1
      {S::Weight, D::Float32, {24, 8, 1, 1}, 0, 2},     // 4 we
      {S::Weight, D::Float32, {24}, 0, 3},              // 5 be
      {S::Weight, D::Float32, {24, 1, 3, 3}, 0, 4},     // 6 wd
      {S::Weight, D::Float32, {24}, 0, 5},              // 7 bd
      {S::Weight, D::Float32, {8, 24, 1, 1}, 0, 6},     // 8 wp
      {S::Weight, D::Float32, {8}, 0, 7},               // 9 bp
      {S::None, D::Float32, {}, 0, 0},                  // 10 none
      {S::Arena, D::Float32, {1, 8, 8, 8}, 0, 0},       // 11 block
      {S::Weight, D::Float32, {96, 8, 3, 3}, 0, 8},     // 12 w3
      {S::Weight, D::Float32, {96}, 0, 9},              // 13 b3
      {S::Arena, D::Float32, {1, 96, 3, 3}, 16384, 0},  // 14 out
      {S::Arena, D::Float32, {1, 96, 1, 1}, 19840, 0},  // 15 pooled
  };
  auto conv_attrs = [](int64_t stride, int64_t pad) {
    return std::vector<kiln::testing::AttrSpecT>{{"stride", K::Ints, 0, 0, {stride, stride}},
                                                 {"padding", K::Ints, 0, 0, {pad, pad}},
                                                 {"dilation", K::Ints, 0, 0, {1, 1}},
                                                 {"groups", K::Int, 1}};
  };
  auto pooled_attrs = conv_attrs(2, 0);
  pooled_attrs.push_back({"activation", K::Int, 2});
  a.instrs = {
      {"conv2d", {0, 1, 2}, {3}, conv_attrs(1, 1)},
      {"mbconv",
       {3, 4, 5, 6, 7, 8, 9, 10},
       {11},
       {{"stride", K::Ints, 0, 0, {2, 2}},
        {"padding", K::Ints, 0, 0, {1, 1}},
        {"expand_activation", K::Int, 2},
        {"dw_activation", K::Int, 2},
        {"project_activation", K::Int, 0},
        {"strategy", K::Int, 1}}},  // channels-last: whole images
      {"conv2d", {11, 12, 13}, {14}, conv_attrs(2, 0)},
      {"conv2d_avgpool", {11, 12, 13}, {15}, pooled_attrs},
  };
  a.inputs = {{"x", 0}};
  a.outputs = {{"y", 14}, {"pooled", 15}};
  a.arena_bytes = 19840 + 96 * 4;
  return a;
}

// Generated instructions naming block forms (format version 3), without code: a matmul whose
// chain 2y + t names a block epilogue (its output in the matmul's bytes), then z + t naming a
// block prologue of the linear after it. Both run their portable forms.
ArtifactSpec block_forms() {
  ArtifactSpec a;
  a.version = 3;
  auto f32 = [](std::vector<int64_t> shape, uint64_t offset) {
    return kiln::testing::SlotSpec{fb::SlotKind::Arena, fb::DType::Float32, shape, offset, 0};
  };
  a.slots = {f32({4, 8}, 0),    f32({8, 8}, 128),  f32({4, 8}, 384), f32({4, 8}, 512),
             f32({4, 8}, 512),  f32({4, 8}, 640),  f32({4, 8}, 768), f32({4, 8}, 896),
             f32({4, 8}, 1024), f32({6, 8}, 1152), f32({4, 6}, 1344)};
  kiln::testing::InstrSpec epilogue;
  epilogue.control = fb::Control::Generated;
  epilogue.symbol = "kiln_gen_0";
  epilogue.block_epilogue = "kiln_gen_0_block";
  epilogue.inputs = {3, 2};
  epilogue.outputs = {4};
  epilogue.body_size = 2;
  epilogue.yields = {6};
  kiln::testing::InstrSpec prologue;
  prologue.control = fb::Control::Generated;
  prologue.symbol = "kiln_gen_1";
  prologue.block_prologue = "kiln_gen_1_prologue";
  prologue.inputs = {4, 2};
  prologue.outputs = {7};
  prologue.body_size = 1;
  prologue.yields = {8};
  a.instrs = {{"matmul", {0, 1}, {3}, {}},     epilogue, {"add", {3, 3}, {5}, {}},
              {"add", {5, 2}, {6}, {}},        prologue, {"add", {4, 2}, {8}, {}},
              {"linear", {7, 9, -1}, {10}, {}}};
  a.inputs = {{"a", 0}, {"b", 1}, {"t", 2}, {"w", 9}};
  a.outputs = {{"out", 10}};
  a.arena_bytes = 1440;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SEED_DIR BROKEN_DIR\n", argv[0]);
    return 2;
  }
  const std::string seeds = argv[1], broken = argv[2];
  write(seeds + "/linear_relu.kiln", linear_relu().build());
  write(seeds + "/conv_net.kiln", conv_net().build());
  write(seeds + "/mixed_ops.kiln", mixed_ops().build());
  write(seeds + "/conv_blocks.kiln", conv_blocks().build());
  write(seeds + "/control_flow.kiln", kiln::testing::control_flow_spec().build());
  write(seeds + "/block_forms.kiln", block_forms().build());

  const std::vector<uint8_t> good = linear_relu().build();
  auto variant = [&](const std::string& name, const std::function<void(ArtifactSpec&)>& f) {
    ArtifactSpec a = linear_relu();
    f(a);
    write(broken + "/" + name + ".kiln", a.build());
  };
  auto bytes = [&](const std::string& name, std::vector<uint8_t> b) {
    write(broken + "/" + name + ".kiln", b);
  };
  bytes("empty", {});
  bytes("truncated_header", std::vector<uint8_t>(good.begin(), good.begin() + 6));
  bytes("truncated_table", std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 3));
  bytes("truncated_weights", std::vector<uint8_t>(good.begin(), good.end() - 20));
  {
    auto b = good;
    b[4 + 4] = 'X';  // file identifier "KILN" -> "XILN"
    bytes("bad_identifier", b);
  }
  {
    auto b = good;
    b[0] = 0xff, b[1] = 0xff, b[2] = 0xff, b[3] = 0x7f;  // size prefix far beyond the file
    bytes("size_prefix_too_big", b);
  }
  bytes("zeros", std::vector<uint8_t>(good.size(), 0));
  variant("bad_version", [](ArtifactSpec& a) { a.version = 7; });
  variant("bad_arena_offset", [](ArtifactSpec& a) { a.slots[3].offset = 1ull << 40; });
  variant("huge_dims", [](ArtifactSpec& a) { a.slots[3].shape = {1ll << 33, 1ll << 33}; });
  variant("huge_arena", [](ArtifactSpec& a) { a.arena_bytes = ~0ull; });
  variant("wrong_dtype", [](ArtifactSpec& a) { a.slots[0].dtype = static_cast<fb::DType>(99); });
  variant("unknown_kernel", [](ArtifactSpec& a) { a.instrs[1].kernel = "quantum_relu"; });
  variant("bad_weight_index", [](ArtifactSpec& a) { a.slots[2].weight = 1000; });
  variant("weight_too_small", [](ArtifactSpec& a) { a.slots[1].shape = {4, 3000}; });
  variant("bad_operand", [](ArtifactSpec& a) { a.instrs[0].inputs[2] = 1 << 30; });
  variant("writes_weight", [](ArtifactSpec& a) { a.instrs[1].outputs = {2}; });
  variant("read_before_write", [](ArtifactSpec& a) { a.instrs[0].inputs[0] = 4; });
  variant("missing_attribute", [](ArtifactSpec& a) { a.instrs[1] = {"softmax", {3}, {4}, {}}; });
  variant("foreign_target", [](ArtifactSpec& a) { a.target_triple = "aarch64-linux-gnu"; });
  variant("negative_dim", [](ArtifactSpec& a) { a.slots[0].shape = {2, -3}; });
  variant("no_outputs", [](ArtifactSpec& a) { a.outputs.clear(); });
  auto control = [&](const std::string& name, const std::function<void(ArtifactSpec&)>& f) {
    ArtifactSpec a = kiln::testing::control_flow_spec();
    f(a);
    write(broken + "/" + name + ".kiln", a.build());
  };
  control("region_past_end", [](ArtifactSpec& a) { a.instrs[3].body_size = 1u << 30; });
  control("branch_value_after_if", [](ArtifactSpec& a) { a.instrs[3].inputs = {3}; });
  control("loop_counter_float", [](ArtifactSpec& a) { a.slots[8].dtype = fb::DType::Float32; });
  control("loop_step_zero", [](ArtifactSpec& a) { a.instrs[3].step = 0; });
  control("control_in_version_1", [](ArtifactSpec& a) { a.version = 1; });
  auto blocks = [&](const std::string& name, const std::function<void(ArtifactSpec&)>& f) {
    ArtifactSpec a = block_forms();
    f(a);
    write(broken + "/" + name + ".kiln", a.build());
  };
  blocks("block_epilogue_not_in_place", [](ArtifactSpec& a) { a.slots[4].offset = 1024; });
  blocks("block_epilogue_after_an_add", [](ArtifactSpec& a) { a.instrs[0].kernel = "add"; });
  blocks("block_prologue_value_read_twice", [](ArtifactSpec& a) { a.outputs.push_back({"x", 7}); });
  blocks("block_prologue_before_an_add", [](ArtifactSpec& a) {
    a.instrs[6] = {"add", {7, 2}, {10}, {}};
    a.slots[10].shape = {4, 8};
    a.arena_bytes = 1472;
  });
  variant("missing_symbol", [](ArtifactSpec& a) {
    a.instrs[1].kernel.clear();
    a.instrs[1].symbol = "kiln_fn_0";
  });
  return 0;
}
