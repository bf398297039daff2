// `kiln train`: runs a saved training step (forward + backward + optimizer update in one .kiln)
// for N steps over batches cut from .npy files, then writes the trained state (parameters and
// optimizer state) to .safetensors: on-device fine-tuning with kiln_runtime alone.

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "artifact_commands.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"

namespace kiln::cli {
namespace {

const char* kTrainHelp =
    "usage: kiln train M.kiln --data X.npy [--data Y.npy]... --steps N\n"
    "                  [--set NAME=VALUE]... [--save W.safetensors] [--log-every K]\n\n"
    "Runs the training step M.kiln (saved by kiln::jit::save from a traced step) N times. Each\n"
    "--data file holds one batched input of the step along axis 0 (in input order); step i\n"
    "takes the i-th batch of the step's batch size, wrapping around. The step's scalar inputs\n"
    "(an optimizer's SGD.group0.lr, ...) are given with --set; the first output (the loss) is\n"
    "printed every K steps (default 10). --save writes the trained parameters and optimizer\n"
    "state by name.\n";

struct TrainArgs {
  std::string artifact, save;
  std::vector<std::string> data;
  std::map<std::string, double> scalars;
  int64_t steps = -1, log_every = 10;
  bool help = false;
  std::string bad;
};

TrainArgs parse_train(int argc, char** argv) {
  TrainArgs a;
  for (int i = 0; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      KILN_CHECK(i + 1 < argc, "kiln train", "option ", s, " needs a value");
      return argv[++i];
    };
    if (s == "--help" || s == "-h") {
      a.help = true;
    } else if (s == "--data") {
      a.data.push_back(value());
    } else if (s == "--steps") {
      a.steps = std::stoll(value());
    } else if (s == "--log-every") {
      a.log_every = std::stoll(value());
    } else if (s == "--save") {
      a.save = value();
    } else if (s == "--set") {
      const std::string kv = value();
      const size_t eq = kv.find('=');
      KILN_CHECK(eq != std::string::npos && eq > 0, "kiln train",
                 "--set: expected NAME=VALUE, got '", kv, "'");
      a.scalars[kv.substr(0, eq)] = std::stod(kv.substr(eq + 1));
    } else if (!s.empty() && s[0] == '-') {
      a.bad = "unknown option '" + s + "'";
    } else if (a.artifact.empty()) {
      a.artifact = s;
    } else {
      a.bad = "unexpected argument '" + s + "'";
    }
  }
  if (!a.help && a.bad.empty()) {
    if (a.artifact.empty())
      a.bad = "missing the artifact path";
    else if (a.steps < 0)
      a.bad = "missing --steps N (N >= 0)";
    else if (a.log_every < 1)
      a.bad = "--log-every: expected >= 1";
  }
  return a;
}

}  // namespace

int train_artifact(int argc, char** argv) {
  const TrainArgs a = parse_train(argc, argv);
  if (a.help) return std::fputs(kTrainHelp, stdout), 0;
  if (!a.bad.empty()) {
    std::fprintf(stderr, "kiln train: %s\n\n%s", a.bad.c_str(), kTrainHelp);
    return 2;
  }
  auto model = rt::Model::load(a.artifact);
  const std::vector<std::string> state = model->state_names();
  KILN_CHECK(!state.empty(), "kiln train", "\"", a.artifact,
             "\" is not a training step (it updates no state); save a traced training step");
  const auto& specs = model->inputs();
  // Inputs in order: the batched data first, then the scalars given by name.
  std::vector<Tensor> datasets, scalars;
  std::vector<const TensorImpl*> in(specs.size(), nullptr);
  std::vector<int> dataset_of(specs.size(), -1);  // input -> its --data tensor
  size_t next_data = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const rt::TensorSpec& s = specs[i];
    if (auto it = a.scalars.find(s.name); it != a.scalars.end()) {
      KILN_CHECK(s.shape.empty(), "kiln train", "--set ", s.name, ": input \"", s.name,
                 "\" is not a scalar, it has shape ", s.shape);
      scalars.push_back(scalar_tensor(it->second, TensorOptions(s.dtype)));
      in[i] = scalars.back().impl();
      continue;
    }
    KILN_CHECK(next_data < a.data.size(), "kiln train", "input ", i, " (\"", s.name, "\", ",
               rt::describe_spec(s.shape, s.dtype), ") needs ",
               s.shape.empty() ? "a value: --set " + s.name + "=VALUE" : "a --data file");
    Tensor d = read_npy(a.data[next_data++]).contiguous();
    KILN_CHECK(!s.shape.empty() && d.dim() == static_cast<int64_t>(s.shape.size()) &&
                   d.dtype() == s.dtype && d.size(0) >= s.shape[0],
               "kiln train", "--data ", a.data[next_data - 1], ": expected batches of ",
               rt::describe_spec(s.shape, s.dtype), " stacked along axis 0, got ",
               rt::describe_spec(d.sizes(), d.dtype()));
    for (size_t k = 1; k < s.shape.size(); ++k)
      KILN_CHECK(d.size(static_cast<int64_t>(k)) == s.shape[k], "kiln train", "--data ",
                 a.data[next_data - 1], ": expected batches of ",
                 rt::describe_spec(s.shape, s.dtype), ", got ",
                 rt::describe_spec(d.sizes(), d.dtype()));
    dataset_of[i] = static_cast<int>(datasets.size());
    datasets.push_back(d);
  }
  KILN_CHECK(next_data == a.data.size(), "kiln train", "the step takes ", next_data,
             " batched inputs, got ", a.data.size(), " --data files");
  int64_t num_batches = -1;  // the same for every --data file: batch i pairs the i-th of each
  for (size_t i = 0; i < specs.size(); ++i) {
    if (dataset_of[i] < 0) continue;
    KILN_CHECK(specs[i].shape[0] > 0, "kiln train", "input \"", specs[i].name,
               "\" has batch size 0");
    const int64_t n = datasets[dataset_of[i]].size(0) / specs[i].shape[0];
    KILN_CHECK(num_batches < 0 || n == num_batches, "kiln train", "--data ", a.data[dataset_of[i]],
               " holds ", n, " batches, the files before it ", num_batches);
    num_batches = n;
  }
  for (const auto& [name, v] : a.scalars) {
    bool known = false;
    for (const rt::TensorSpec& s : specs) known |= s.name == name;
    KILN_CHECK(known, "kiln train", "--set ", name, ": the step has no input of that name");
  }

  rt::Session session(model);
  std::vector<Tensor> batches(datasets.size());
  for (int64_t step = 0; step < a.steps; ++step) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (dataset_of[i] < 0) continue;
      const Tensor& d = datasets[dataset_of[i]];
      const int64_t b = specs[i].shape[0], start = (step % num_batches) * b;
      batches[dataset_of[i]] = d.slice(0, start, start + b).contiguous();
      in[i] = batches[dataset_of[i]].impl();
    }
    std::vector<TensorImplPtr> out = session.run(in);
    if (!out.empty() && ((step + 1) % a.log_every == 0 || step + 1 == a.steps)) {
      const Tensor loss = Tensor(out[0]).to(DType::Float64);
      std::printf("step %lld: %s %.6g\n", static_cast<long long>(step + 1),
                  model->outputs()[0].name.c_str(),
                  loss.numel() == 1 ? loss.item<double>() : mean(loss).item<double>());
    }
  }
  if (!a.save.empty()) {
    NamedTensors trained;
    for (const std::string& name : state) {
      const TensorImpl* t = session.state(name);
      KILN_CHECK(t, "kiln train", "the session has no state \"", name, "\"");
      trained.emplace_back(name, Tensor(TensorImplPtr(const_cast<TensorImpl*>(t))).clone());
    }
    write_safetensors(a.save, trained);
    std::printf("wrote %zu tensors to %s\n", trained.size(), a.save.c_str());
  }
  return 0;
}

}  // namespace kiln::cli
