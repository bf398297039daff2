// nn::Module core: registration and qualified names, traversal, train/eval, zero_grad, to(dtype),
// state_dict / load_state_dict (round trip and errors), forward and full backward hooks, a module
// used twice in one forward. Expected values are hand-derived.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "kiln/nn.h"

using namespace kiln;

namespace {

// fc1 -> relu -> fc2, plus a buffer and a nested block, to exercise qualified names.
struct Block : nn::Module {
  Block() : Module("Block") {
    lin = register_module("lin", std::make_shared<nn::Linear>(4, 4));
    bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(4));
  }
  Tensor forward(const Tensor& x) override { return (*bn)((*lin)(x)); }
  std::shared_ptr<nn::Linear> lin;
  std::shared_ptr<nn::BatchNorm1d> bn;
};

struct Net : nn::Module {
  Net()
      : Module("Net"),
        scale(register_parameter("scale", kiln::ones({1}))),
        steps(register_buffer("steps", kiln::zeros({1}))),
        scratch(register_buffer("scratch", kiln::zeros({2}), /*persistent=*/false)) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(3, 4));
    block = register_module("block", std::make_shared<Block>());
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(4, 2, /*bias=*/false));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*block)((*fc1)(x)))) * scale; }
  Tensor& scale;
  Tensor& steps;
  Tensor& scratch;
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<Block> block;
};

std::vector<std::string> keys_of(const nn::OrderedDict<Tensor>& d) {
  return d.keys();
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(DType::Float64) - b.to(DType::Float64))).item<double>();
}

}  // namespace

TEST(Module, QualifiedNamesInRegistrationOrder) {
  auto net = std::make_shared<Net>();
  std::vector<std::string> want = {
      "scale",          "fc1.weight",      "fc1.bias",      "block.lin.weight",
      "block.lin.bias", "block.bn.weight", "block.bn.bias", "fc2.weight"};
  EXPECT_EQ(keys_of(net->named_parameters()), want);
  EXPECT_EQ(net->parameters().size(), want.size());
  EXPECT_EQ(keys_of(net->named_parameters(/*recurse=*/false)), std::vector<std::string>{"scale"});
  std::vector<std::string> bufs = {"steps", "scratch", "block.bn.running_mean",
                                   "block.bn.running_var", "block.bn.num_batches_tracked"};
  EXPECT_EQ(keys_of(net->named_buffers()), bufs);
  // fc2 has no bias: registered as "none" and skipped.
  EXPECT_FALSE(net->fc2->bias.defined());
  EXPECT_EQ(net->named_children().keys(), (std::vector<std::string>{"fc1", "block", "fc2"}));
  EXPECT_EQ(net->named_modules().keys(),
            (std::vector<std::string>{"", "fc1", "block", "block.lin", "block.bn", "fc2"}));
  EXPECT_EQ(net->modules().size(), 6u);
  EXPECT_EQ(net->modules(false).size(), 5u);
  EXPECT_EQ(net->children().size(), 3u);
  // 1 + (12 + 4) + (16 + 4 + 4 + 4) + 8
  EXPECT_EQ(net->num_parameters(), 1 + 16 + 28 + 8);
  EXPECT_TRUE(net->get_parameter("block.lin.weight").is_same(net->block->lin->weight));
  EXPECT_TRUE(net->get_buffer("block.bn.running_var").is_same(net->block->bn->running_var));
  EXPECT_EQ(net->get_submodule("block.bn").get(), net->block->bn.get());
  EXPECT_THROW(net->get_submodule("block.nope"), Error);
  EXPECT_THROW(net->get_parameter("fc1.nope"), Error);
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
  for (const Tensor& b : net->buffers()) EXPECT_FALSE(b.requires_grad());
}

TEST(Module, RegistrationErrors) {
  nn::Module m;
  m.register_parameter("w", kiln::zeros({2}));
  EXPECT_THROW(m.register_parameter("w", kiln::zeros({2})), Error);
  EXPECT_THROW(m.register_buffer("w", kiln::zeros({2})), Error);
  EXPECT_THROW(m.register_module("w", std::make_shared<nn::ReLU>()), Error);
  EXPECT_THROW(m.register_parameter("a.b", kiln::zeros({2})), Error);
  EXPECT_THROW(m.register_parameter("", kiln::zeros({2})), Error);
  EXPECT_THROW(m.register_parameter("i", kiln::zeros({2}, TensorOptions(DType::Int64))), Error);
  // An integer parameter that does not require grad is fine.
  EXPECT_NO_THROW(m.register_parameter("j", kiln::zeros({2}, TensorOptions(DType::Int64)), false));
  try {
    m.forward(kiln::zeros({1}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not implemented"), std::string::npos);
  }
}

TEST(Module, SharedSubmodulesAndParametersCountedOnce) {
  auto lin = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential seq({lin, std::make_shared<nn::ReLU>(), lin});
  EXPECT_EQ(seq.parameters().size(), 2u);
  EXPECT_EQ(seq.num_parameters(), 6);
  EXPECT_EQ(seq.modules().size(), 3u);  // seq, lin, relu
  // state_dict keeps both names, as PyTorch does.
  EXPECT_EQ(seq.state_dict().keys(),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
}

TEST(Module, TrainEvalApply) {
  auto net = std::make_shared<Net>();
  EXPECT_TRUE(net->is_training());
  net->eval();
  for (const auto& m : net->modules()) EXPECT_FALSE(m->is_training()) << m->type_name();
  net->train();
  for (const auto& m : net->modules()) EXPECT_TRUE(m->is_training()) << m->type_name();
  std::vector<std::string> order;
  net->apply([&](nn::Module& m) { order.push_back(m.type_name()); });
  // Children first, then self.
  EXPECT_EQ(order, (std::vector<std::string>{"Linear", "Linear", "BatchNorm1d", "Block", "Linear",
                                             "Net"}));
  net->apply([](nn::Module& m) {
    if (auto* lin = dynamic_cast<nn::Linear*>(&m)) nn::init::constant_(lin->weight, 0.5);
  });
  EXPECT_DOUBLE_EQ(amin(net->fc1->weight).item<double>(), 0.5);
  EXPECT_DOUBLE_EQ(amax(net->block->lin->weight).item<double>(), 0.5);
}

TEST(Module, ZeroGradAndTo) {
  auto net = std::make_shared<Net>();
  Tensor x = kiln::ones({5, 3});
  sum((*net)(x)).backward();
  for (const Tensor& p : net->parameters()) ASSERT_TRUE(p.grad().defined());
  net->zero_grad(/*set_to_none=*/false);
  for (const Tensor& p : net->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(amax(abs(p.grad())).item<double>(), 0.0);
  }
  net->zero_grad();
  for (const Tensor& p : net->parameters()) EXPECT_FALSE(p.grad().defined());

  Tensor before = net->fc1->weight.clone();
  net->to(DType::Float64);
  for (const Tensor& p : net->parameters()) {
    EXPECT_EQ(p.dtype(), DType::Float64);
    EXPECT_TRUE(p.requires_grad() && p.is_leaf());
  }
  // The layer's own member sees the converted slot.
  EXPECT_EQ(net->fc1->weight.dtype(), DType::Float64);
  EXPECT_EQ(max_abs_diff(net->fc1->weight, before), 0.0);
  EXPECT_EQ(net->block->bn->running_mean.dtype(), DType::Float64);
  EXPECT_EQ(net->block->bn->num_batches_tracked.dtype(), DType::Int64);  // not floating: kept
  Tensor y = (*net)(kiln::ones({5, 3}, TensorOptions(DType::Float64)));
  EXPECT_EQ(y.dtype(), DType::Float64);
  sum(y).backward();
  EXPECT_EQ(net->fc1->weight.grad().dtype(), DType::Float64);
}

TEST(Module, StateDictRoundTrip) {
  nn::init::manual_seed(1);
  auto a = std::make_shared<Net>();
  auto b = std::make_shared<Net>();
  // Make the running statistics differ from the defaults.
  a->train();
  (*a)(kiln::linspace(-1, 2, 15).reshape({5, 3}));
  auto sd = a->state_dict();
  std::vector<std::string> want = {"scale",
                                   "steps",
                                   "fc1.weight",
                                   "fc1.bias",
                                   "block.lin.weight",
                                   "block.lin.bias",
                                   "block.bn.weight",
                                   "block.bn.bias",
                                   "block.bn.running_mean",
                                   "block.bn.running_var",
                                   "block.bn.num_batches_tracked",
                                   "fc2.weight"};
  EXPECT_EQ(sd.keys(), want);  // non-persistent "scratch" left out
  EXPECT_FALSE(sd["fc1.weight"].requires_grad());
  EXPECT_EQ(sd["block.bn.num_batches_tracked"].item<int64_t>(), 1);
  EXPECT_EQ(sd["fc1.weight"].data(), a->fc1->weight.data());  // shares data

  Tensor b_weight = b->fc1->weight;  // identity must survive loading
  EXPECT_GT(max_abs_diff(b->fc1->weight, a->fc1->weight), 0.0);
  auto res = b->load_state_dict(sd);
  EXPECT_TRUE(res.missing_keys.empty() && res.unexpected_keys.empty());
  EXPECT_TRUE(b->fc1->weight.is_same(b_weight));
  for (const auto& [k, v] : b->state_dict()) EXPECT_EQ(max_abs_diff(v, sd[k]), 0.0) << k;
  a->eval();
  b->eval();
  Tensor x = kiln::linspace(0, 1, 6).reshape({2, 3});
  EXPECT_EQ(max_abs_diff((*a)(x), (*b)(x)), 0.0);
}

TEST(Module, LoadStateDictErrors) {
  auto net = std::make_shared<Net>();
  auto sd = net->state_dict();

  // Missing key.
  nn::StateDict missing = sd;
  missing.erase("fc1.bias");
  try {
    net->load_state_dict(missing);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("Missing key(s) in state_dict: \"fc1.bias\""), std::string::npos) << msg;
  }
  // Unexpected key.
  nn::StateDict extra = sd;
  extra.insert("fc3.weight", kiln::zeros({2}));
  try {
    net->load_state_dict(extra);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("Unexpected key(s) in state_dict: \"fc3.weight\""), std::string::npos)
        << msg;
  }
  // Shape mismatch: error even when not strict, and nothing is copied.
  nn::StateDict bad = sd;
  bad.insert_or_assign("fc1.weight", kiln::zeros({4, 5}));
  bad.insert_or_assign("fc2.weight", kiln::full({2, 4}, 7.0));
  Tensor fc2_before = net->fc2->weight.clone();
  try {
    net->load_state_dict(bad, /*strict=*/false);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("size mismatch for fc1.weight: copying a param with shape [4, 5] from "
                       "checkpoint, the shape in current model is [4, 3]"),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(max_abs_diff(net->fc2->weight, fc2_before), 0.0);

  // Non-strict: loads what matches and reports the rest.
  nn::StateDict partial;
  partial.insert("fc2.weight", kiln::full({2, 4}, 3.0));
  partial.insert("other", kiln::zeros({1}));
  auto res = net->load_state_dict(partial, /*strict=*/false);
  EXPECT_EQ(res.unexpected_keys, std::vector<std::string>{"other"});
  // Every other entry is missing but num_batches_tracked, which checkpoints may omit.
  EXPECT_EQ(res.missing_keys.size(), sd.size() - 2);
  EXPECT_DOUBLE_EQ(amin(net->fc2->weight).item<double>(), 3.0);
  // A float64 checkpoint loads into float32 parameters (converted).
  nn::StateDict f64;
  f64.insert("fc2.weight", kiln::full({2, 4}, 0.25, TensorOptions(DType::Float64)));
  net->load_state_dict(f64, false);
  EXPECT_EQ(net->fc2->weight.dtype(), DType::Float32);
  EXPECT_DOUBLE_EQ(amax(net->fc2->weight).item<double>(), 0.25);
}

// PyTorch's compatibility rule: a checkpoint without a BatchNorm's num_batches_tracked (written
// before the buffer existed, or by a converter that drops it) loads, even strictly, and the
// buffer keeps its value; any other missing key is still an error.
TEST(Module, LoadStateDictWithoutNumBatchesTracked) {
  auto a = std::make_shared<Net>(), b = std::make_shared<Net>();
  a->train();
  (*a)(kiln::linspace(0, 1, 6).reshape({2, 3}));  // num_batches_tracked becomes 1
  nn::StateDict sd = a->state_dict();
  sd.erase("block.bn.num_batches_tracked");
  ASSERT_EQ(b->block->bn->num_batches_tracked.item<int64_t>(), 0);
  auto res = b->load_state_dict(sd);
  EXPECT_TRUE(res.missing_keys.empty()) << res.missing_keys.size();
  EXPECT_EQ(b->block->bn->num_batches_tracked.item<int64_t>(), 0);  // kept
  EXPECT_EQ(max_abs_diff(b->block->bn->running_mean, a->block->bn->running_mean), 0.0);
  // Not strict: not reported missing either.
  EXPECT_TRUE(b->load_state_dict(sd, /*strict=*/false).missing_keys.empty());
  // The running statistics themselves are not optional.
  sd.erase("block.bn.running_var");
  try {
    b->load_state_dict(sd);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("Missing key(s) in state_dict: \"block.bn.running_var\"."),
              std::string::npos)
        << msg;
  }
}

TEST(Module, ForwardHooks) {
  auto lin = std::make_shared<nn::Linear>(2, 1);
  nn::init::constant_(lin->weight, 1.0);
  nn::init::constant_(lin->bias, 0.0);
  TensorList seen_in, seen_out;
  size_t pre = lin->register_forward_pre_hook([](nn::Module&, const TensorList& in) {
    return std::optional<TensorList>(TensorList{in[0] * 2.0});  // doubles the input
  });
  size_t post = lin->register_forward_hook(
      [&](nn::Module& m, const TensorList& in, const TensorList& out) -> std::optional<TensorList> {
        EXPECT_EQ(m.type_name(), "Linear");
        seen_in = in;
        seen_out = out;
        return TensorList{out[0] + 100.0};
      });
  Tensor x = kiln::tensor({{1.0, 2.0}});
  Tensor y = (*lin)(x);
  // pre-hook: x -> 2x = [2, 4]; forward: 6; forward hook: +100.
  EXPECT_DOUBLE_EQ(y.item<double>(), 106.0);
  EXPECT_DOUBLE_EQ(seen_in[0].index({0, 1}).item<double>(), 4.0);
  EXPECT_DOUBLE_EQ(seen_out[0].item<double>(), 6.0);
  // forward() itself runs no hooks.
  EXPECT_DOUBLE_EQ(lin->forward(x).item<double>(), 3.0);
  EXPECT_TRUE(lin->remove_hook(pre));
  EXPECT_DOUBLE_EQ((*lin)(x).item<double>(), 103.0);
  EXPECT_TRUE(lin->remove_hook(post));
  EXPECT_FALSE(lin->remove_hook(post));
  EXPECT_DOUBLE_EQ((*lin)(x).item<double>(), 3.0);
}

TEST(Module, FullBackwardHook) {
  // y = x Wᵀ with W = [[1, 2], [3, 4]]: dL/dy = g, dL/dx = g W.
  auto lin = std::make_shared<nn::Linear>(2, 2, false);
  {
    autograd::NoGradGuard ng;
    copy_(lin->weight, kiln::tensor({{1.0, 2.0}, {3.0, 4.0}}));
  }
  TensorList gin, gout;
  int calls = 0;
  lin->register_full_backward_hook([&](nn::Module&, const TensorList& grad_input,
                                       const TensorList& grad_output) -> std::optional<TensorList> {
    ++calls;
    gin = grad_input;
    gout = grad_output;
    return std::nullopt;
  });
  Tensor x = kiln::tensor({{1.0, 1.0}}).requires_grad_();
  Tensor y = (*lin)(x);
  // L = 1*y0 + 10*y1: g = [1, 10]; dL/dx = [1 + 30, 2 + 40].
  sum(y * kiln::tensor({{1.0, 10.0}})).backward();
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(gout.size(), 1u);
  EXPECT_DOUBLE_EQ(gout[0].index({0, 1}).item<double>(), 10.0);
  ASSERT_EQ(gin.size(), 1u);
  EXPECT_DOUBLE_EQ(gin[0].index({0, 0}).item<double>(), 31.0);
  EXPECT_DOUBLE_EQ(gin[0].index({0, 1}).item<double>(), 42.0);
  EXPECT_DOUBLE_EQ(x.grad().index({0, 1}).item<double>(), 42.0);
  // Weight gradient unaffected by the hook: dL/dW = gᵀ x.
  EXPECT_DOUBLE_EQ(lin->weight.grad().index({1, 0}).item<double>(), 10.0);

  // A hook replacing grad_input changes what reaches x.
  auto lin2 = std::make_shared<nn::Linear>(2, 2, false);
  lin2->register_full_backward_hook(
      [](nn::Module&, const TensorList& grad_input, const TensorList&) {
        return std::optional<TensorList>(TensorList{grad_input[0] * 0.5});
      });
  Tensor x2 = kiln::tensor({{1.0, -1.0}}).requires_grad_();
  sum((*lin2)(x2)).backward();
  Tensor expect = sum(lin2->weight.detach(), {0}) * 0.5;
  EXPECT_NEAR(max_abs_diff(x2.grad().reshape({2}), expect), 0.0, 1e-7);

  // Input that does not require grad: the hook still runs, with an undefined grad_input.
  calls = 0;
  Tensor x3 = kiln::tensor({{1.0, 1.0}});
  sum((*lin)(x3)).backward();
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(gin.size(), 1u);
  EXPECT_FALSE(gin[0].defined());
  EXPECT_DOUBLE_EQ(gout[0].index({0, 0}).item<double>(), 1.0);
}

TEST(Module, ModuleCalledTwiceSumsGradients) {
  // y = W (W x): dL/dW for L = sum(y) equals the sum of both uses' contributions.
  auto lin = std::make_shared<nn::Linear>(2, 2, false);
  Tensor w0;
  {
    autograd::NoGradGuard ng;
    copy_(lin->weight, kiln::tensor({{1.0, 2.0}, {-1.0, 0.5}}));
    w0 = lin->weight.clone();
  }
  int hook_calls = 0;
  lin->register_full_backward_hook([&](nn::Module&, const TensorList&, const TensorList&) {
    ++hook_calls;
    return std::optional<TensorList>();
  });
  Tensor x = kiln::tensor({{3.0, -2.0}});
  Tensor h = (*lin)(x);
  Tensor y = (*lin)(h);
  sum(y).backward();
  EXPECT_EQ(hook_calls, 2);
  // L = 1ᵀ W W x. dL/dW = (Wᵀ1) xᵀ + 1 (W x)ᵀ, hand computed with w0.
  double w[2][2] = {{1.0, 2.0}, {-1.0, 0.5}};
  double xv[2] = {3.0, -2.0};
  double wt1[2] = {w[0][0] + w[1][0], w[0][1] + w[1][1]};
  double wx[2] = {w[0][0] * xv[0] + w[0][1] * xv[1], w[1][0] * xv[0] + w[1][1] * xv[1]};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      EXPECT_NEAR(lin->weight.grad().index({i, j}).item<double>(), wt1[i] * xv[j] + wx[j], 1e-5)
          << i << "," << j;
  (void)w0;
}

TEST(Module, Repr) {
  nn::Sequential seq({std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::ReLU>()});
  EXPECT_EQ(
      seq.repr(),
      "Sequential(\n  (0): Linear(in_features=3, out_features=4, bias=True)\n  (1): ReLU()\n)");
}
