// Data-parallel training across processes. Start it with a launcher, which gives each process its
// rank (the program reads RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or Open MPI's variables):
//
//   torchrun-style:  MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 example_distributed &
//                    MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 example_distributed
//   Open MPI:        mpirun -np 2 example_distributed
//
// Every rank builds the same data (a teacher network's outputs), takes its share of each batch
// (DataLoaderOptions::num_replicas / rank), and trains a replica wrapped in
// DistributedDataParallel; the averaged gradients keep the
// replicas equal, so every rank prints the same parameter checksum, which a run with one process
// on the whole batch reproduces up to rounding.
//
// Options: --steps N (default 30), --batch B (global batch, default 64, a multiple of the world
// size), --hidden H (default 256), --bucket-mb M (default 25, may be fractional), --timeout S
// (seconds any wait for another rank may last, default 1800).

#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dist = kiln::distributed;
namespace nn = kiln::nn;

namespace {

nn::ModulePtr make_mlp(int64_t in, int64_t hidden, int64_t out) {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(in, hidden), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(hidden, hidden), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(hidden, out)});
}

double arg(int argc, char** argv, const char* name, double fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atof(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) try {
  const auto steps = static_cast<int64_t>(arg(argc, argv, "--steps", 30));
  const auto batch = static_cast<int64_t>(arg(argc, argv, "--batch", 64));
  const auto hidden = static_cast<int64_t>(arg(argc, argv, "--hidden", 256));
  const double bucket_mb = arg(argc, argv, "--bucket-mb", 25);
  const double timeout_s = arg(argc, argv, "--timeout", 1800);

  dist::InitOptions init;
  init.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  auto group = dist::init_process_group(init);
  const int rank = group->rank(), world = group->size();
  if (batch % world != 0) {
    std::fprintf(stderr, "the batch (%lld) must be a multiple of the world size (%d)\n",
                 static_cast<long long>(batch), world);
    return 2;
  }

  // The same dataset on every rank (a fixed teacher's outputs on fixed inputs); each rank's
  // loader takes its share of every epoch's shuffled order (as PyTorch's DistributedSampler).
  kiln::manual_seed(1234);
  auto teacher = make_mlp(32, 64, 10);
  const kiln::Tensor x = kiln::randn({4 * batch, 32});
  kiln::Tensor y;
  {
    kiln::autograd::NoGradGuard no_grad;
    y = (*teacher)(x);
  }
  kiln::data::DataLoader loader(std::make_shared<kiln::data::TensorDataset>(x, y),
                                {.batch_size = batch / world,
                                 .shuffle = true,
                                 .seed = 5,
                                 .num_replicas = world,
                                 .rank = rank});

  // Ranks may start from different weights: the wrapper copies rank 0's.
  kiln::manual_seed(42 + rank);
  dist::DistributedDataParallelOptions options;
  options.bucket_cap_mb = bucket_mb;
  auto model = std::make_shared<dist::DistributedDataParallel>(make_mlp(32, hidden, 10), options);
  kiln::optim::SGD opt(model->parameters(), kiln::optim::SGDOptions(0.05).momentum(0.9));

  double loss = 0;
  for (int64_t s = 0; s < steps;) {
    for (auto& shard : loader) {  // one epoch: 4 steps
      opt.zero_grad();
      kiln::Tensor local = kiln::mse_loss(model->forward(shard.data), shard.target);
      local.backward();
      opt.step();
      // The whole batch's loss: the mean of the ranks' means (equal shards).
      kiln::Tensor global = local.detach().clone();
      group->all_reduce(global, dist::ReduceOp::Avg);
      loss = global.item<double>();
      if (rank == 0 && (s == 0 || s + 1 == steps)) {
        std::printf("step %lld: loss %.6f\n", static_cast<long long>(s), loss);
      }
      if (++s == steps) break;
    }
  }
  double checksum = 0;
  for (const kiln::Tensor& p : model->parameters()) {
    checksum += (p.to(kiln::DType::Float64) * p.to(kiln::DType::Float64)).sum().item<double>();
  }
  std::printf("rank %d of %d: final loss %.6f, parameter checksum %.10e\n", rank, world, loss,
              checksum);
  group->barrier();
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
