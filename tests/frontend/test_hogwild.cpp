// Hogwild!: lock-free multi-threaded SGD on one model's shared parameters (examples/hogwild)
// converges with 2 and 4 threads, and the threads' updates all land in the one shared model.
#include <gtest/gtest.h>

#include "../../examples/hogwild/hogwild.h"

TEST(Hogwild, LinearRegressionConvergesWith2And4Threads) {
  for (int threads : {2, 4}) {
    hogwild::Config c;
    c.threads = threads;
    c.steps_per_thread = 300;
    const hogwild::Result r = hogwild::train(c);
    EXPECT_EQ(r.updates, int64_t{threads} * 300);
    EXPECT_GT(r.initial_loss, 1.0);
    // The noise variance (1e-4) is the best any model can do.
    EXPECT_LT(r.final_loss, 3 * r.noise_floor)
        << threads << " threads: " << r.initial_loss << " -> " << r.final_loss;
  }
}

TEST(Hogwild, MlpConvergesWith3Threads) {
  hogwild::Config c;
  c.threads = 3;
  c.hidden = 8;
  c.steps_per_thread = 1500;
  c.lr = 0.1;
  const hogwild::Result r = hogwild::train(c);
  EXPECT_LT(r.final_loss, 0.01 * r.initial_loss) << r.initial_loss << " -> " << r.final_loss;
}

TEST(Hogwild, EveryThreadsUpdatesReachTheSharedModel) {
  // Same steps per thread, small lr: 4 threads apply 4x the updates to the one model, so it gets
  // much closer to the teacher than 1 thread does.
  auto run = [](int threads) {
    hogwild::Config c;
    c.threads = threads;
    c.steps_per_thread = 50;
    c.lr = 0.01;
    return hogwild::train(c);
  };
  const hogwild::Result one = run(1), four = run(4);
  EXPECT_EQ(four.updates, 200);
  EXPECT_LT(four.final_loss, 0.25 * one.final_loss) << one.final_loss << " vs " << four.final_loss;
}
