// The on-device training loop (see kiln/runtime/train_loop.h).

#include "kiln/runtime/train_loop.h"

#include <cstdio>
#include <cstring>

#include "kiln/runtime/error.h"
#include "kiln/runtime/npy.h"

namespace kiln::rt {

const char* const kTrainLoopOptionsHelp =
    "--data X.npy [--data Y.npy]... --steps N [--set NAME=VALUE]... [--save W.safetensors]\n"
    "[--log-every K]\n\n"
    "Each --data file holds one batched input of the step along axis 0 (in input order); step i\n"
    "takes the i-th batch of the step's batch size, wrapping around. The step's scalar inputs\n"
    "(an optimizer's SGD.group0.lr, ...) are given with --set; the first output (the loss) is\n"
    "printed every K steps (default 10). --save writes the trained parameters and optimizer\n"
    "state by name.\n";

TrainLoopArgs parse_train_loop_args(int argc, char** argv) {
  TrainLoopArgs a;
  for (int i = 0; i < argc && a.bad.empty(); ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        a.bad = "option " + s + " needs a value";
        return "";
      }
      return argv[++i];
    };
    auto integer = [&](const std::string& v, int64_t& out) {
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end) a.bad = s + ": expected an integer, got '" + v + "'";
      out = n;
    };
    if (s == "--help" || s == "-h") {
      a.help = true;
    } else if (s == "--data") {
      a.data.push_back(value());
    } else if (s == "--steps") {
      integer(value(), a.steps);
    } else if (s == "--log-every") {
      integer(value(), a.log_every);
    } else if (s == "--save") {
      a.save = value();
    } else if (s == "--set") {
      const std::string kv = value();
      const size_t eq = kv.find('=');
      char* end = nullptr;
      const double v = eq == std::string::npos ? 0 : std::strtod(kv.c_str() + eq + 1, &end);
      if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size() || *end)
        a.bad = "--set: expected NAME=VALUE, got '" + kv + "'";
      else
        a.scalars[kv.substr(0, eq)] = v;
    } else if (!s.empty() && s[0] == '-') {
      a.bad = "unknown option '" + s + "'";
    } else {
      a.positional.push_back(s);
    }
  }
  if (!a.help && a.bad.empty()) {
    if (a.steps < 0)
      a.bad = "missing --steps N (N >= 0)";
    else if (a.log_every < 1)
      a.bad = "--log-every: expected >= 1";
  }
  return a;
}

double mean_as_double(DType dtype, const void* p, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::Float32:
        sum += static_cast<const float*>(p)[i];
        break;
      case DType::Float64:
        sum += static_cast<const double*>(p)[i];
        break;
      case DType::Float16:
        sum += Half::to_float(static_cast<const uint16_t*>(p)[i]);
        break;
      case DType::BFloat16:
        sum += BFloat16::to_float(static_cast<const uint16_t*>(p)[i]);
        break;
      case DType::Int8:
        sum += static_cast<const int8_t*>(p)[i];
        break;
      case DType::UInt8:
      case DType::Bool:
        sum += static_cast<const uint8_t*>(p)[i];
        break;
      case DType::Int32:
        sum += static_cast<const int32_t*>(p)[i];
        break;
      case DType::Int64:
        sum += static_cast<double>(static_cast<const int64_t*>(p)[i]);
        break;
    }
  }
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

namespace {

// A 0-dim value of `dtype` holding v (a --set scalar).
std::vector<uint8_t> scalar_bytes(DType dtype, double v) {
  std::vector<uint8_t> b(dtype_size(dtype));
  auto put = [&](auto x) { std::memcpy(b.data(), &x, sizeof x); };
  switch (dtype) {
    case DType::Float32:
      put(static_cast<float>(v));
      break;
    case DType::Float64:
      put(v);
      break;
    case DType::Float16:
      put(Half::from_float(static_cast<float>(v)));
      break;
    case DType::BFloat16:
      put(BFloat16::from_float(static_cast<float>(v)));
      break;
    case DType::Int8:
      put(static_cast<int8_t>(v));
      break;
    case DType::UInt8:
      put(static_cast<uint8_t>(v));
      break;
    case DType::Bool:
      put(static_cast<uint8_t>(v != 0));
      break;
    case DType::Int32:
      put(static_cast<int32_t>(v));
      break;
    case DType::Int64:
      put(static_cast<int64_t>(v));
      break;
  }
  return b;
}

}  // namespace

void run_train_loop(const char* tool, const TrainLoopArgs& a, const TrainStep& step) {
  const std::vector<TensorSpec>& specs = step.inputs;
  // Inputs in order: the batched data first, then the scalars given by name.
  std::vector<npy::Array> datasets;
  std::vector<std::vector<uint8_t>> scalars;
  std::vector<const void*> in(specs.size(), nullptr);
  std::vector<int> dataset_of(specs.size(), -1);  // input -> its --data array
  size_t next_data = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    if (auto it = a.scalars.find(s.name); it != a.scalars.end()) {
      KILN_CHECK(s.shape.empty(), tool, "--set ", s.name, ": input \"", s.name,
                 "\" is not a scalar, it has shape ", describe_spec(s.shape, s.dtype));
      scalars.push_back(scalar_bytes(s.dtype, it->second));
      in[i] = scalars.back().data();
      continue;
    }
    KILN_CHECK(next_data < a.data.size(), tool, "input ", i, " (\"", s.name, "\", ",
               describe_spec(s.shape, s.dtype), ") needs ",
               s.shape.empty() ? "a value: --set " + s.name + "=VALUE" : "a --data file");
    const std::string& path = a.data[next_data++];
    npy::Array d = npy::read(path);
    bool fits = !s.shape.empty() && d.shape.size() == s.shape.size() && d.dtype == s.dtype &&
                d.shape[0] >= s.shape[0];
    for (size_t k = 1; fits && k < s.shape.size(); ++k) fits = d.shape[k] == s.shape[k];
    KILN_CHECK(fits, tool, "--data ", path, ": expected batches of ",
               describe_spec(s.shape, s.dtype), " stacked along axis 0, got ",
               describe_spec(d.shape, d.dtype));
    KILN_CHECK(s.shape[0] > 0, tool, "input \"", s.name, "\" has batch size 0");
    dataset_of[i] = static_cast<int>(datasets.size());
    datasets.push_back(std::move(d));
  }
  KILN_CHECK(next_data == a.data.size(), tool, "the step takes ", next_data,
             " batched inputs, got ", a.data.size(), " --data files");
  for (const auto& [name, v] : a.scalars) {
    bool known = false;
    for (const TensorSpec& s : specs) known |= s.name == name;
    KILN_CHECK(known, tool, "--set ", name, ": the step has no input of that name");
  }
  int64_t num_batches = -1;  // the same for every --data file: batch i pairs the i-th of each
  for (size_t i = 0; i < specs.size(); ++i) {
    if (dataset_of[i] < 0) continue;
    const int64_t n = datasets[dataset_of[i]].shape[0] / specs[i].shape[0];
    KILN_CHECK(num_batches < 0 || n == num_batches, tool, "--data ", a.data[dataset_of[i]],
               " holds ", n, " batches, the files before it ", num_batches);
    num_batches = n;
  }

  for (int64_t s = 0; s < a.steps; ++s) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (dataset_of[i] < 0) continue;
      const npy::Array& d = datasets[dataset_of[i]];
      const size_t batch_bytes =
          d.data.size() / static_cast<size_t>(d.shape[0]) * static_cast<size_t>(specs[i].shape[0]);
      in[i] = d.data.data() + static_cast<size_t>(s % num_batches) * batch_bytes;
    }
    const double loss = step.run(in);
    if ((s + 1) % a.log_every == 0 || s + 1 == a.steps)
      std::printf("step %lld: %s %.6g\n", static_cast<long long>(s + 1), step.loss_name.c_str(),
                  loss);
  }
  if (!a.save.empty()) {
    const std::vector<safetensors::Entry> trained = step.state();
    safetensors::write(a.save, trained, {}, tool);
    std::printf("wrote %zu tensors to %s\n", trained.size(), a.save.c_str());
  }
}

}  // namespace kiln::rt
