// The process group and DistributedDataParallel on CUDA tensors (staged through host memory):
// two ranks, threads of this process, sharing the one device. Skips without a device.
#include <gtest/gtest.h>

#include "../frontend/distributed_util.h"
#include "cuda_test_util.h"
#include "kiln/runtime/cuda/nccl.h"

namespace dist = kiln::distributed;
using kiln::Tensor;

TEST(CudaDistributed, CollectivesOnDeviceTensorsMatchTheHostOnes) {
  KILN_REQUIRE_CUDA_DEVICE();
  test::run_ranks(2, [&](const auto& group) {
    const int r = group->rank();
    kiln::manual_seed(100 + r);
    const Tensor host = kiln::randn({1000, 3});
    // all_reduce of a strided device view, written back in place.
    Tensor dev = host.cuda().t();
    Tensor expect = host.t().contiguous();
    group->all_reduce(dev);
    group->all_reduce(expect);
    EXPECT_EQ(kiln::cuda_test::values(dev), kiln::cuda_test::values(expect));
    // broadcast from rank 1 and all_gather.
    Tensor b = kiln::full({7}, double(r + 3)).cuda();
    group->broadcast(b, 1);
    EXPECT_EQ(kiln::cuda_test::values(b), std::vector<float>(7, 4.0f));
    kiln::TensorList all = group->all_gather(kiln::full({2}, double(r)).cuda());
    ASSERT_EQ(all.size(), 2u);
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(all[k].device(), kiln::Device::CUDA);
      EXPECT_EQ(kiln::cuda_test::values(all[k]), std::vector<float>(2, float(k)));
    }
  });
}

TEST(CudaDistributed, DataParallelOnTheDeviceMatchesTheHost) {
  KILN_REQUIRE_CUDA_DEVICE();
  auto make = [](uint64_t seed) {
    kiln::manual_seed(seed);
    return std::make_shared<kiln::nn::Sequential>(std::initializer_list<kiln::nn::ModulePtr>{
        std::make_shared<kiln::nn::Linear>(5, 16), std::make_shared<kiln::nn::ReLU>(),
        std::make_shared<kiln::nn::Linear>(16, 2)});
  };
  kiln::manual_seed(9);
  const Tensor x = kiln::randn({8, 5}), y = kiln::randn({8, 2});
  std::vector<kiln::TensorList> on_host(2), on_device(2);
  for (bool cuda : {false, true}) {
    std::vector<kiln::nn::ModulePtr> models{make(1), make(2)};  // rank 1 starts elsewhere
    if (cuda) {
      for (auto& m : models) m->to(kiln::Device::CUDA);
    }
    test::run_ranks(2, [&](const auto& group) {
      const int r = group->rank();
      dist::DistributedDataParallelOptions o;
      o.group = group;
      o.bucket_cap_mb = 0.0002;  // several buckets
      dist::DistributedDataParallel ddp(models[r], o);
      kiln::optim::SGD opt(ddp.parameters(), kiln::optim::SGDOptions(0.1).momentum(0.9));
      Tensor xs = x.narrow(0, 4 * r, 4), ys = y.narrow(0, 4 * r, 4);
      if (cuda) {
        xs = xs.cuda();
        ys = ys.cuda();
      }
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        kiln::mse_loss(ddp.forward(xs), ys).backward();
        opt.step();
      }
      for (const Tensor& p : ddp.parameters()) (cuda ? on_device : on_host)[r].push_back(p.cpu());
    });
  }
  for (int r = 0; r < 2; ++r) {
    for (size_t k = 0; k < on_host[r].size(); ++k) {
      const double diff = (on_device[r][k] - on_host[r][k]).abs().max().item<double>();
      EXPECT_LT(diff, 1e-5) << "rank " << r << " parameter " << k;
    }
  }
}

namespace {

std::shared_ptr<dist::ProcessGroup> nccl_group_of_one() {
  auto store = std::make_shared<dist::TCPStore>("", 0, true, std::chrono::seconds(30));
  dist::ProcessGroupOptions o;
  o.backend = "nccl";
  return std::make_shared<dist::ProcessGroup>(store, 0, 1, o);
}

}  // namespace

// NCCL loads and makes communicator ids without a device (CI has the toolkit, no GPU).
TEST(CudaNccl, LoadsAndMakesDistinctIds) {
  int version = 0;
  try {
    version = kiln::cuda::nccl::version();
  } catch (const kiln::Error& e) {
    GTEST_SKIP() << "needs NCCL: " << e.what();
  }
  EXPECT_GE(version, 21300);  // ncclGetLastError and ncclAvg: NCCL 2.13 and later
  const auto a = kiln::cuda::nccl::unique_id(), b = kiln::cuda::nccl::unique_id();
  EXPECT_NE(a, b);
  EXPECT_NE(a, kiln::cuda::nccl::UniqueId{});
}

TEST(CudaNccl, AGroupWithoutADeviceSaysSo) {
  if (kiln::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  const std::string m = test::message_of([] { nccl_group_of_one(); });
  EXPECT_NE(m.find("no CUDA device"), std::string::npos) << m;
  auto store = std::make_shared<dist::TCPStore>("", 0, true, std::chrono::seconds(5));
  dist::ProcessGroupOptions o;
  o.backend = "mpi";
  EXPECT_NE(
      test::message_of([&] { dist::ProcessGroup(store, 0, 1, o); }).find("unknown backend 'mpi'"),
      std::string::npos);
}

// One rank (one GPU on the device machine): every NCCL collective on device tensors, and DDP
// through NCCL training as the plain model does.
TEST(CudaNccl, GroupOfOneRankRunsEveryCollectiveAndDdp) {
  KILN_REQUIRE_CUDA_DEVICE();
  try {
    kiln::cuda::nccl::version();
  } catch (const kiln::Error& e) {
    GTEST_SKIP() << "needs NCCL: " << e.what();
  }
  auto group = nccl_group_of_one();
  EXPECT_STREQ(group->backend(), "nccl");
  kiln::manual_seed(3);
  const Tensor host = kiln::randn({257, 3});
  Tensor dev = host.cuda();
  group->all_reduce(dev, dist::ReduceOp::Avg);
  EXPECT_EQ(kiln::cuda_test::values(dev), kiln::cuda_test::values(host));
  Tensor strided = host.cuda().t();
  group->all_reduce(strided, dist::ReduceOp::Max);
  EXPECT_EQ(kiln::cuda_test::values(strided), kiln::cuda_test::values(host.t()));
  group->broadcast(dev, 0);
  EXPECT_EQ(kiln::cuda_test::values(dev), kiln::cuda_test::values(host));
  kiln::TensorList all = group->all_gather(dev);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(kiln::cuda_test::values(all[0]), kiln::cuda_test::values(host));
  // Host tensors in an NCCL group go through the ring.
  Tensor cpu = host.clone();
  group->all_reduce(cpu);
  EXPECT_EQ(kiln::cuda_test::values(cpu), kiln::cuda_test::values(host));

  auto make = [] {
    kiln::manual_seed(4);
    return std::make_shared<kiln::nn::Sequential>(std::initializer_list<kiln::nn::ModulePtr>{
        std::make_shared<kiln::nn::Linear>(3, 8), std::make_shared<kiln::nn::Tanh>(),
        std::make_shared<kiln::nn::Linear>(8, 1)});
  };
  auto plain = make(), wrapped = make();
  plain->to(kiln::Device::CUDA);
  wrapped->to(kiln::Device::CUDA);
  dist::DistributedDataParallelOptions o;
  o.group = group;
  o.bucket_cap_mb = 0.0001;
  dist::DistributedDataParallel ddp(wrapped, o);
  const Tensor x = host.cuda(), y = host.narrow(1, 0, 1).cuda();
  for (kiln::nn::Module* m :
       {static_cast<kiln::nn::Module*>(plain.get()), static_cast<kiln::nn::Module*>(&ddp)}) {
    kiln::optim::SGD opt(m->parameters(), kiln::optim::SGDOptions(0.1));
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      kiln::mse_loss((*m)(x), y).backward();
      opt.step();
    }
  }
  const auto a = plain->parameters(), b = wrapped->parameters();
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(kiln::cuda_test::values(a[k]), kiln::cuda_test::values(b[k])) << "parameter " << k;
  }
}

// Ranks that ask for different backends, or cannot run NCCL, fail together before any of them
// waits in NCCL's setup (which has no deadline).
TEST(CudaNccl, RanksDisagreeingOnTheBackendFailAtOnce) {
  auto server = std::make_shared<dist::TCPStore>("", 0, true, std::chrono::seconds(20));
  std::vector<std::string> messages(2);
  const auto start = std::chrono::steady_clock::now();
  std::thread other([&] {
    auto store = std::make_shared<dist::TCPStore>("127.0.0.1", server->port(), false,
                                                  std::chrono::seconds(20));
    dist::ProcessGroupOptions o;
    o.backend = "nccl";
    messages[1] = test::message_of([&] { dist::ProcessGroup(store, 1, 2, o); });
  });
  messages[0] = test::message_of([&] { dist::ProcessGroup(server, 0, 2); });  // tcp
  other.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(messages[0].find("rank 1 asked for the nccl backend, rank 0 for tcp"),
            std::string::npos)
      << messages[0];
  EXPECT_NE(messages[1].find("rank 0 asked for the tcp backend, rank 1 for nccl"),
            std::string::npos)
      << messages[1];
}
