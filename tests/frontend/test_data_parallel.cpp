// DistributedDataParallel against one process training on the whole batch: the replicas start
// from rank 0's weights, their averaged gradients equal the full batch's, and after optimizer
// steps every rank holds the same parameters as the single-process reference (and the same
// bytes as each other). Buckets, unused parameters and no_sync go through the same comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "distributed_util.h"
#include "kiln/kiln.h"

namespace dist = kiln::distributed;
namespace nn = kiln::nn;
using kiln::Tensor;

namespace {

nn::ModulePtr make_mlp(uint64_t seed) {
  kiln::manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(16, 8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 3)});
}

// A copy of `from`'s parameter values in a model built like it.
nn::ModulePtr clone_of(const nn::ModulePtr& from, uint64_t seed) {
  auto m = make_mlp(seed);
  m->load_state_dict(from->state_dict());
  return m;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return (a.to(kiln::DType::Float64) - b.to(kiln::DType::Float64)).abs().max().item<double>();
}

// What one rank ends with.
struct RankResult {
  kiln::TensorList params;  // after training
  kiln::TensorList first_grads;
};

}  // namespace

TEST(DistributedDataParallel, MatchesFullBatchTrainingOnEveryRankCount) {
  kiln::manual_seed(7);
  const Tensor x = kiln::randn({12, 6}), y = kiln::randn({12, 3});
  const auto initial = make_mlp(1);
  const int steps = 4;

  // Reference: one process, the whole batch.
  auto ref = clone_of(initial, 2);
  kiln::optim::SGD ref_opt(ref->parameters(), kiln::optim::SGDOptions(0.1).momentum(0.9));
  kiln::TensorList ref_first_grads;
  for (int s = 0; s < steps; ++s) {
    ref_opt.zero_grad();
    kiln::mse_loss((*ref)(x), y).backward();
    if (s == 0) {
      for (const Tensor& p : ref->parameters()) ref_first_grads.push_back(p.grad().clone());
    }
    ref_opt.step();
  }

  for (int n : {2, 3}) {
    for (double cap_mb : {25.0, 0.0005}) {  // one bucket; one per parameter or two
      // Each rank's replica starts from different weights: the constructor copies rank 0's.
      std::vector<nn::ModulePtr> replicas;
      for (int r = 0; r < n; ++r)
        replicas.push_back(r == 0 ? clone_of(initial, 3) : make_mlp(50 + r));
      std::vector<RankResult> runs(n);
      std::vector<int> buckets(n);
      std::vector<int64_t> overlapped(n);
      test::run_ranks(n, [&](const auto& group) {
        const int r = group->rank();
        dist::DistributedDataParallelOptions o;
        o.group = group;
        o.bucket_cap_mb = cap_mb;
        auto ddp = std::make_shared<dist::DistributedDataParallel>(replicas[r], o);
        buckets[r] = ddp->bucket_count();
        const int64_t rows = 12 / n;
        const Tensor xs = x.narrow(0, r * rows, rows), ys = y.narrow(0, r * rows, rows);
        kiln::optim::SGD opt(ddp->parameters(), kiln::optim::SGDOptions(0.1).momentum(0.9));
        for (int s = 0; s < steps; ++s) {
          opt.zero_grad();
          kiln::mse_loss(ddp->forward(xs), ys).backward();
          if (s == 0) {
            for (const Tensor& p : ddp->parameters())
              runs[r].first_grads.push_back(p.grad().clone());
          }
          opt.step();
        }
        for (const Tensor& p : ddp->parameters()) runs[r].params.push_back(p.detach().clone());
        overlapped[r] = ddp->stats().buckets_overlapped;
        EXPECT_EQ(ddp->stats().buckets_overlapped + ddp->stats().buckets_at_end,
                  int64_t{steps} * ddp->bucket_count());
      });
      SCOPED_TRACE(std::to_string(n) + " ranks, bucket cap " + std::to_string(cap_mb) + " MB");
      if (cap_mb < 1) {
        EXPECT_GT(buckets[0], 1);
        // All but the first layer's buckets start while backward still computes earlier layers.
        EXPECT_GT(overlapped[0], 0);
      }
      const auto ref_params = ref->parameters();
      for (size_t k = 0; k < ref_params.size(); ++k) {
        EXPECT_LT(max_abs_diff(runs[0].first_grads[k], ref_first_grads[k]), 1e-5) << "grad " << k;
        EXPECT_LT(max_abs_diff(runs[0].params[k], ref_params[k]), 1e-5) << "param " << k;
        for (int r = 1; r < n; ++r) {
          EXPECT_EQ(max_abs_diff(runs[r].params[k], runs[0].params[k]), 0.0)
              << "rank " << r << " param " << k;
        }
      }
    }
  }
}

namespace {
// Uses `extra` only when told to: a parameter some ranks leave without a gradient.
class Branchy : public nn::Module {
 public:
  explicit Branchy(bool use_extra) : nn::Module("Branchy"), use_extra_(use_extra) {
    main_ = register_module("main", std::make_shared<nn::Linear>(4, 2));
    extra_ = register_module("extra", std::make_shared<nn::Linear>(4, 2));
    never_ = register_module("never", std::make_shared<nn::Linear>(4, 2));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = (*main_)(x);
    return use_extra_ ? y + (*extra_)(x) : y;
  }
  std::shared_ptr<nn::Linear> main_, extra_, never_;
  bool use_extra_;
};
}  // namespace

TEST(DistributedDataParallel, ParametersWithoutAGradientOnSomeRanksAddZeros) {
  kiln::manual_seed(3);
  const Tensor x = kiln::randn({4, 4});
  std::vector<std::shared_ptr<Branchy>> models;
  for (int r = 0; r < 2; ++r) {
    kiln::manual_seed(11);
    models.push_back(std::make_shared<Branchy>(/*use_extra=*/r == 0));
  }
  // Reference: rank 0's gradient of extra, halved (rank 1 adds zeros).
  kiln::manual_seed(11);
  auto ref = std::make_shared<Branchy>(true);
  (*ref)(x.narrow(0, 0, 2)).sum().backward();
  const Tensor expected_extra = ref->extra_->weight.grad() * 0.5;

  std::vector<Tensor> extra_grad(2), never_grad(2);
  test::run_ranks(2, [&](const auto& group) {
    const int r = group->rank();
    dist::DistributedDataParallelOptions o;
    o.group = group;
    o.bucket_cap_mb = 0.00005;  // a bucket per parameter: the unused ones hold theirs back
    dist::DistributedDataParallel ddp(models[r], o);
    for (int iteration = 0; iteration < 2; ++iteration) {  // the reducer resets between passes
      ddp.zero_grad();
      ddp.forward(x.narrow(0, 2 * r, 2)).sum().backward();
    }
    extra_grad[r] = models[r]->extra_->weight.grad().clone();
    never_grad[r] = models[r]->never_->weight.grad().clone();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(max_abs_diff(extra_grad[r], expected_extra), 1e-6) << "rank " << r;
    EXPECT_EQ(never_grad[r].abs().max().item<double>(), 0.0) << "rank " << r;
  }
}

TEST(DistributedDataParallel, NoSyncAccumulatesLocallyThenAveragesTheSum) {
  kiln::manual_seed(5);
  const Tensor x = kiln::randn({8, 6}), y = kiln::randn({8, 3});
  const auto initial = make_mlp(9);
  // Reference: the four quarter-batches' gradients summed, halved (average over 2 ranks).
  auto ref = clone_of(initial, 10);
  for (int q = 0; q < 4; ++q)
    kiln::mse_loss((*ref)(x.narrow(0, 2 * q, 2)), y.narrow(0, 2 * q, 2)).backward();
  std::vector<nn::ModulePtr> replicas{clone_of(initial, 12), clone_of(initial, 13)};
  std::vector<kiln::TensorList> grads(2);
  test::run_ranks(2, [&](const auto& group) {
    const int r = group->rank();
    dist::DistributedDataParallelOptions o;
    o.group = group;
    dist::DistributedDataParallel ddp(replicas[r], o);
    // Rank r's micro-batches are quarters 2r and 2r + 1.
    {
      auto guard = ddp.no_sync();
      kiln::mse_loss(ddp.forward(x.narrow(0, 4 * r, 2)), y.narrow(0, 4 * r, 2)).backward();
    }
    kiln::mse_loss(ddp.forward(x.narrow(0, 4 * r + 2, 2)), y.narrow(0, 4 * r + 2, 2)).backward();
    for (const Tensor& p : ddp.parameters()) grads[r].push_back(p.grad().clone());
  });
  const auto ref_params = ref->parameters();
  for (size_t k = 0; k < ref_params.size(); ++k) {
    EXPECT_LT(max_abs_diff(grads[0][k], ref_params[k].grad() * 0.5), 1e-6) << "param " << k;
    EXPECT_EQ(max_abs_diff(grads[1][k], grads[0][k]), 0.0) << "param " << k;
  }
}

TEST(DistributedDataParallel, BuffersFollowRankZero) {
  std::vector<nn::ModulePtr> models;
  for (int r = 0; r < 2; ++r) {
    auto m = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::BatchNorm1d>(4)});
    m->get_buffer("1.running_mean").fill_(double(r + 1));
    models.push_back(m);
  }
  std::vector<double> at_start(2), after_forward(2);
  test::run_ranks(2, [&](const auto& group) {
    const int r = group->rank();
    dist::DistributedDataParallelOptions o;
    o.group = group;
    dist::DistributedDataParallel ddp(models[r], o);
    at_start[r] = models[r]->get_buffer("1.running_mean").sum().item<double>();
    // Rank 1 moves its statistics; the next forward starts from rank 0's again.
    if (r == 1) models[r]->get_buffer("1.running_mean").fill_(100.0);
    ddp.forward(kiln::zeros({2, 3}));
    after_forward[r] = models[r]->get_buffer("1.running_mean").sum().item<double>();
  });
  EXPECT_EQ(at_start[0], 4.0);
  EXPECT_EQ(at_start[1], 4.0);
  // Both ranks updated the same statistics from the same start with the same (zero) input.
  EXPECT_EQ(after_forward[1], after_forward[0]);
  EXPECT_LT(after_forward[0], 50.0);
}

TEST(DistributedDataParallel, HooksAreRemovedWithTheWrapper) {
  auto model = make_mlp(4);
  test::run_ranks(1, [&](const auto& group) {
    dist::DistributedDataParallelOptions o;
    o.group = group;
    {
      dist::DistributedDataParallel ddp(model, o);
      EXPECT_EQ(model->parameters()[0].autograd_meta()->post_accumulate_hooks.size(), 1u);
    }
    for (const Tensor& p : model->parameters()) {
      EXPECT_TRUE(p.autograd_meta()->post_accumulate_hooks.empty());
    }
  });
}

TEST(DistributedDataParallel, ABackwardThatThrowsIsReportedAndTheNextStepsAverageAgain) {
  kiln::manual_seed(21);
  const Tensor x = kiln::randn({4, 6}), y = kiln::randn({4, 3});
  const auto initial = make_mlp(22);
  std::vector<nn::ModulePtr> replicas{clone_of(initial, 23), clone_of(initial, 24)};
  std::vector<std::string> reported(2);
  std::vector<kiln::TensorList> grads(2);
  test::run_ranks(2, [&](const auto& group) {
    const int r = group->rank();
    dist::DistributedDataParallelOptions o;
    o.group = group;
    o.bucket_cap_mb = 0.0005;  // the last layers' buckets start before the hook throws
    dist::DistributedDataParallel ddp(replicas[r], o);
    const Tensor xs = x.narrow(0, 2 * r, 2), ys = y.narrow(0, 2 * r, 2);
    // Backward throws on both ranks at the first layer's output gradient.
    const auto layers = replicas[r]->children();
    Tensor hidden = (*layers[0])(xs);
    hidden.register_hook(
        [](const Tensor&) -> std::optional<Tensor> { kiln::fail("test hook", "stop"); });
    Tensor out = hidden;
    for (size_t k = 1; k < layers.size(); ++k) out = (*layers[k])(out);
    EXPECT_THROW(kiln::mse_loss(out, ys).backward(), kiln::Error);
    reported[r] = test::message_of([&] { ddp.forward(xs); });
    // The reducer is reset: the next step averages as if nothing happened.
    ddp.zero_grad();
    kiln::mse_loss(ddp.forward(xs), ys).backward();
    for (const Tensor& p : ddp.parameters()) grads[r].push_back(p.grad().clone());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(reported[r].find("previous backward ended with an error"), std::string::npos)
        << reported[r];
  }
  auto ref = clone_of(initial, 25);
  kiln::mse_loss((*ref)(x), y).backward();
  const auto ref_params = ref->parameters();
  for (size_t k = 0; k < ref_params.size(); ++k) {
    EXPECT_LT(max_abs_diff(grads[0][k], ref_params[k].grad()), 1e-6) << "param " << k;
    EXPECT_EQ(max_abs_diff(grads[1][k], grads[0][k]), 0.0) << "param " << k;
  }
}

TEST(DistributedDataParallel, MovingTheModuleAfterWrappingIsAnError) {
  auto model = make_mlp(4);
  test::run_ranks(1, [&](const auto& group) {
    dist::DistributedDataParallelOptions o;
    o.group = group;
    dist::DistributedDataParallel ddp(model, o);
    model->to(kiln::DType::Float64);
    EXPECT_NE(test::message_of([&] {
                ddp.forward(kiln::ones({1, 6}, kiln::DType::Float64));
              }).find("wrap the module after moving it"),
              std::string::npos);
  });
}

TEST(Autograd, PostAccumulateGradHookAndQueuedCallbacks) {
  Tensor w = kiln::ones({3}).requires_grad_();
  std::vector<std::string> events;
  w.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    events.push_back("hook " + std::to_string(leaf.grad().sum().item<double>()));
    kiln::autograd::queue_callback([&] { events.push_back("end"); });
  });
  (w * 2).sum().backward();
  (w * 3).sum().backward();  // accumulates: the hook sees the sum
  EXPECT_EQ(events, (std::vector<std::string>{"hook 6.000000", "end", "hook 15.000000", "end"}));
  EXPECT_THROW(kiln::autograd::queue_callback([] {}), kiln::Error);
  Tensor t = kiln::ones({2});
  EXPECT_THROW(t.register_post_accumulate_grad_hook([](const Tensor&) {}), kiln::Error);
}

TEST(DataLoaderShards, RanksSplitEachEpochAsDistributedSamplerDoes) {
  const int64_t n = 10;
  auto dataset = std::make_shared<kiln::data::TensorDataset>(
      kiln::arange(0, double(n)).to(kiln::DType::Float32).view({n, 1}));
  for (bool shuffle : {false, true}) {
    for (uint64_t epoch : {0, 1}) {
      std::vector<int64_t> seen;
      const int64_t ranks = 3;
      for (int64_t r = 0; r < ranks; ++r) {
        kiln::data::DataLoader loader(
            dataset,
            {.batch_size = 2, .shuffle = shuffle, .seed = 7, .num_replicas = ranks, .rank = r});
        loader.set_epoch(epoch);
        EXPECT_EQ(loader.size(), 2);  // ceil(10 / 3) = 4 examples, 2 batches
        int64_t count = 0;
        for (auto& batch : loader) {
          for (int64_t i = 0; i < batch.data.size(0); ++i) {
            seen.push_back(int64_t(batch.data.data_ptr<float>()[i]));
            ++count;
          }
        }
        EXPECT_EQ(count, 4);
      }
      // PyTorch's DistributedSampler: the epoch's order padded with its own first elements to
      // 12, then indices[rank::3].
      auto padded = kiln::data::epoch_permutation(n, shuffle, 7, epoch);
      padded.push_back(padded[0]);
      padded.push_back(padded[1]);
      std::vector<int64_t> expected;
      for (int64_t r = 0; r < 3; ++r) {
        for (size_t i = size_t(r); i < padded.size(); i += 3) expected.push_back(padded[i]);
      }
      EXPECT_EQ(seen, expected) << "shuffle " << shuffle << " epoch " << epoch;
      std::vector<int64_t> sorted = seen;
      std::sort(sorted.begin(), sorted.end());
      sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
      EXPECT_EQ(sorted.size(), size_t(n));
    }
  }
  EXPECT_THROW(kiln::data::DataLoader(dataset, {.num_replicas = 2, .rank = 2}), kiln::Error);
}

TEST(DistributedDataParallel, ABackwardThatThrowsOnOneRankIsAnErrorOnBoth) {
  kiln::manual_seed(31);
  const Tensor x = kiln::randn({4, 6}), y = kiln::randn({4, 3});
  const auto initial = make_mlp(32);
  std::vector<nn::ModulePtr> replicas{clone_of(initial, 33), clone_of(initial, 34)};
  std::vector<std::string> errors(2);
  test::run_ranks(
      2,
      [&](const auto& group) {
        const int r = group->rank();
        dist::DistributedDataParallelOptions o;
        o.group = group;
        o.bucket_cap_mb = 0.0005;
        dist::DistributedDataParallel ddp(replicas[r], o);
        const Tensor xs = x.narrow(0, 2 * r, 2), ys = y.narrow(0, 2 * r, 2);
        for (int attempt = 0; attempt < 3 && errors[r].empty(); ++attempt) {
          errors[r] = test::message_of([&] {
            Tensor out = ddp.forward(xs);
            if (r == 1 && attempt == 0) {
              out.register_hook(
                  [](const Tensor&) -> std::optional<Tensor> { kiln::fail("test hook", "stop"); });
            }
            kiln::mse_loss(out, ys).backward();
          });
          if (r == 1 && attempt == 0) errors[r].clear();  // its own failure, expected
        }
      },
      std::chrono::seconds(20));
  // Rank 0 waited for the rest of step 1's buckets; rank 1's next buckets are step 2's (or its
  // forward reported the failed backward): never a silent average of different steps.
  EXPECT_NE(errors[0].find("ranks disagree"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("tagged"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1], "(no error)");
}
