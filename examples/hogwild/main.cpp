// Hogwild!: N threads train one model's shared parameters by lock-free SGD (see hogwild.h).
//   example_hogwild [threads=4] [hidden=0 (linear regression) | H (one tanh layer of H units)]
#include <cstdio>
#include <cstdlib>

#include "hogwild.h"

int main(int argc, char** argv) {
  hogwild::Config c;
  if (argc > 1) c.threads = std::atoi(argv[1]);
  if (argc > 2) c.hidden = std::atoi(argv[2]);
  if (c.threads < 1) c.threads = 1;
  if (c.hidden > 0) c.steps_per_thread = 2000, c.lr = 0.1;
  std::printf("hogwild: %d threads, %s, %d steps each, batch %d, lr %g\n", c.threads,
              c.hidden ? "MLP" : "linear regression", c.steps_per_thread, c.batch_size, c.lr);
  try {
    const hogwild::Result r = hogwild::train(c);
    std::printf("loss %.6f -> %.6f (noise floor %.6f), %lld updates in %.3f s\n", r.initial_loss,
                r.final_loss, r.noise_floor, static_cast<long long>(r.updates), r.seconds);
    return r.final_loss < 0.1 * r.initial_loss ? 0 : 1;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
