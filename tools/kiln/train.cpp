// `kiln train`: runs a saved training step (forward + backward + optimizer update in one .kiln)
// for N steps over batches cut from .npy files, then writes the trained state (parameters and
// optimizer state) to .safetensors: on-device fine-tuning with kiln_runtime alone.

#include <cstdio>
#include <string>
#include <vector>

#include "artifact_commands.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/train_loop.h"

namespace kiln::cli {

int train_artifact(int argc, char** argv) {
  static const std::string help =
      std::string("usage: kiln train M.kiln ") + rt::kTrainLoopOptionsHelp +
      "\nRuns the training step M.kiln (saved by kiln::jit::save from a traced step) N times.\n";
  const rt::TrainLoopArgs a = rt::parse_train_loop_args(argc, argv);
  if (a.help) return std::fputs(help.c_str(), stdout), 0;
  std::string bad = a.bad;
  if (bad.empty() && a.positional.size() != 1)
    bad = a.positional.empty() ? "missing the artifact path"
                               : "unexpected argument '" + a.positional[1] + "'";
  if (!bad.empty()) {
    std::fprintf(stderr, "kiln train: %s\n\n%s", bad.c_str(), help.c_str());
    return 2;
  }
  const std::string& path = a.positional[0];
  auto model = rt::Model::load(path);
  const std::vector<std::string> state = model->state_names();
  KILN_CHECK(!state.empty(), "kiln train", "\"", path,
             "\" is not a training step (it updates no state); save a traced training step");
  rt::Session session(model);
  rt::TrainStep step;
  step.inputs = model->inputs();
  step.loss_name = model->outputs()[0].name;
  std::vector<TensorImplPtr> views(step.inputs.size());
  std::vector<const TensorImpl*> in(step.inputs.size());
  step.run = [&](const std::vector<const void*>& data) {
    for (size_t i = 0; i < data.size(); ++i) {
      views[i] =
          kiln::from_blob(const_cast<void*>(data[i]), step.inputs[i].shape, step.inputs[i].dtype);
      in[i] = views[i].get();
    }
    const std::vector<TensorImplPtr> out = session.run(in);
    return rt::mean_as_double(out[0]->dtype(), out[0]->data(), out[0]->numel());
  };
  step.state = [&] {
    std::vector<safetensors::Entry> trained;
    for (const std::string& name : state) {
      const TensorImpl* t = session.state(name);
      KILN_CHECK(t, "kiln train", "the session has no state \"", name, "\"");
      trained.push_back({name, t->dtype(),
                         std::vector<int64_t>(t->sizes().begin(), t->sizes().end()), t->data()});
    }
    return trained;
  };
  rt::run_train_loop("kiln train", a, step);
  return 0;
}

}  // namespace kiln::cli
