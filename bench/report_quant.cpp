// report_quant: int8 post-training quantization of the zoo's CNNs (issue #26's accuracy and size
// numbers). Per model (ResNet-18, MobileNetV2; batch 1, 3x224x224): random weights whose
// batch-norm statistics come from training-mode passes (so activations are normalized as in a
// trained network), kiln::quant with per-channel int8 weights and uint8 activations calibrated
// on 32 random inputs, then both artifacts (float32 and int8, each on kiln_runtime's kernels) run
// on 32 other inputs: SQNR of int8 against float32, top-1 agreement and the file sizes. With
// --out DIR, writes DIR/<model>.kiln and DIR/<model>_int8.kiln for `kiln bench`, and the weights
// (DIR/<model>.safetensors, torchvision's names) and inputs (DIR/<model>_calibration.npy and
// DIR/<model>_test.npy) for bench/peers/quant_peers.py; --layers
// adds the SQNR at every observed value (Prepared::compare, the float32 simulation).
//
//   build/release/bench/report_quant [--out DIR] [--model resnet18|mobilenet_v2]
//                                    [--method minmax|percentile] [--layers]

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/jit/quantize.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/runtime/model.h"
#include "kiln/serialize.h"

namespace {

using namespace kiln;

int64_t top1(const Tensor& row) {
  const Tensor r = row.contiguous();
  const float* p = r.data_ptr<float>();
  int64_t best = 0;
  for (int64_t i = 1; i < r.numel(); ++i)
    if (p[i] > p[best]) best = i;
  return best;
}

void write(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void report(const std::string& name, const std::string& out, quant::Calibration method,
            bool per_layer) {
  manual_seed(1);
  std::shared_ptr<nn::Module> model =
      name == "resnet18" ? std::static_pointer_cast<nn::Module>(models::resnet18(1000))
                         : std::static_pointer_cast<nn::Module>(models::mobilenet_v2(1000));
  {
    autograd::NoGradGuard no_grad;
    model->train();
    for (int i = 0; i < 20; ++i) (*model)(randn({2, 3, 224, 224}));  // momentum 0.1: 0.9^20
    model->eval();
  }
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> calibration, test;
  for (int i = 0; i < 32; ++i) calibration.push_back(randn({1, 3, 224, 224}));
  for (int i = 0; i < 32; ++i) test.push_back(randn({1, 3, 224, 224}));

  const std::vector<uint8_t> fp32 = jit::save_to_bytes(jit::trace(*model, {test[0]}));
  quant::QConfig config;
  config.calibration = method;
  quant::Prepared prepared = quant::prepare(jit::trace(*model, {test[0]}), config);
  for (const Tensor& x : calibration) prepared.calibrate({x});
  if (per_layer) {
    std::vector<TensorList> batches;
    for (const Tensor& x : test) batches.push_back({x});
    for (const quant::PointError& e : prepared.compare(batches))
      std::printf("  %-28s %6.1f dB\n", e.name.c_str(), e.sqnr.db());
  }
  int64_t int8_layers = 0;
  const size_t layers = prepared.layers().size();
  for (const quant::LayerReport& r : prepared.layers()) int8_layers += r.quantized;
  const std::vector<uint8_t> int8 = jit::save_to_bytes(quant::convert(std::move(prepared)));

  rt::Session fs(rt::Model::from_bytes(fp32)), qs(rt::Model::from_bytes(int8));
  quant::Sqnr error;
  int64_t agree = 0;
  for (const Tensor& x : test) {
    const Tensor r = Tensor(fs.run({x.impl()})[0]), q = Tensor(qs.run({x.impl()})[0]);
    error.add(r, q);
    agree += top1(r) == top1(q);
  }
  std::printf(
      "%-13s int8 layers %lld of %zu, SQNR %.1f dB over %zu inputs, top-1 agreement "
      "%lld/%zu, file %.1f MB vs %.1f MB float32 (%.2fx)\n",
      name.c_str(), static_cast<long long>(int8_layers), layers, error.db(), test.size(),
      static_cast<long long>(agree), test.size(), int8.size() / 1e6, fp32.size() / 1e6,
      static_cast<double>(int8.size()) / static_cast<double>(fp32.size()));
  if (!out.empty()) {
    write(out + "/" + name + ".kiln", fp32);
    write(out + "/" + name + "_int8.kiln", int8);
    // The same weights and inputs for the peers (bench/peers/quant_peers.py).
    NamedTensors state;
    for (const auto& [k, t] : model->named_parameters()) state.emplace_back(k, t);
    for (const auto& [k, t] : model->named_buffers()) state.emplace_back(k, t);
    write_safetensors(out + "/" + name + ".safetensors", state);
    write_npy(out + "/" + name + "_calibration.npy", cat(calibration, 0));
    write_npy(out + "/" + name + "_test.npy", cat(test, 0));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, only, method = "minmax";
  bool per_layer = false;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--layers")) per_layer = true;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--out")) out = argv[i + 1];
    if (!std::strcmp(argv[i], "--model")) only = argv[i + 1];
    if (!std::strcmp(argv[i], "--method")) method = argv[i + 1];
  }
  const quant::Calibration m =
      method == "percentile" ? quant::Calibration::Percentile : quant::Calibration::MinMax;
  try {
    for (const char* name : {"resnet18", "mobilenet_v2"})
      if (only.empty() || only == name) report(name, out, m, per_layer);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "report_quant: %s\n", e.what());
    return 1;
  }
  return 0;
}
