#pragma once
// The loop of on-device training, shared by `kiln train M.kiln` (a saved training step run by a
// Session) and the executable `kiln compile --emit exe` makes of a training step: parse
// `--data X.npy... --steps N [--set NAME=VALUE]... [--save W.safetensors] [--log-every K]`, cut
// step i's batch out of each --data file (along axis 0, wrapping around), run the step, print the
// loss every K steps and write the trained state (parameters and optimizer state) by name.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/runtime/model.h"
#include "kiln/runtime/safetensors.h"

namespace kiln::rt {

struct TrainLoopArgs {
  std::vector<std::string> positional;  // what is not an option (kiln train: the artifact)
  std::vector<std::string> data;
  std::map<std::string, double> scalars;
  int64_t steps = -1, log_every = 10;
  std::string save;
  bool help = false;
  std::string bad;  // a usage error, to print with the help text
};

// The usage lines of the options (for a tool's help text).
extern const char* const kTrainLoopOptionsHelp;

TrainLoopArgs parse_train_loop_args(int argc, char** argv);

// One training step as the loop sees it. `run` gets one pointer per input (contiguous data of
// that input's spec) and returns the mean of its first output (the loss); `state` the trained
// tensors after the steps.
struct TrainStep {
  std::vector<TensorSpec> inputs;
  std::string loss_name;
  std::function<double(const std::vector<const void*>&)> run;
  std::function<std::vector<safetensors::Entry>()> state;
};

// Runs args.steps steps; throws kiln::Error (as `tool`) on bad data or options.
void run_train_loop(const char* tool, const TrainLoopArgs& args, const TrainStep& step);

// The mean of n elements of `dtype` at p, as double (a loss of any dtype).
double mean_as_double(DType dtype, const void* p, int64_t n);

}  // namespace kiln::rt
