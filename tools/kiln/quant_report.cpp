// `kiln quant-report INT8.kiln --reference FP32.kiln --input X.npy`: how far an int8 artifact
// strays from its float32 original. Both run on kiln_runtime (the int8 one on its integer
// kernels) over every batch of X; per output: SQNR and, for [N, classes] outputs, how often the
// two agree on the top class. The per-layer SQNR table `kiln export/import --quantize` measured
// and stored in the artifact follows, so the layer that hurts can be found.

#include "quant_report.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "batches.h"
#include "kiln/kiln.h"
#include "kiln/quant/sqnr.h"
#include "kiln/runtime/model.h"

namespace kiln::cli {
namespace {

const char* kHelp =
    "usage: kiln quant-report INT8.kiln --reference FP32.kiln --input X.npy\n\n"
    "Runs an int8 artifact (kiln export/import --quantize int8) and its float32 reference on\n"
    "every batch of X.npy (samples along the batch axis) and prints per output the SQNR\n"
    "(10 log10(sum ref^2 / sum (ref - int8)^2)) and, for [N, classes] outputs, the top-1\n"
    "agreement; then the per-layer SQNR recorded when the artifact was quantized.\n";

int64_t argmax_row(const float* p, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (p[i] > p[best]) best = i;
  return best;
}

}  // namespace

int quant_report(int argc, char** argv) {
  std::string int8_path, reference_path, input;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      KILN_CHECK(i + 1 < argc, "quant-report", "option ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kHelp, stdout);
      return 0;
    } else if (a == "--reference") {
      reference_path = value();
    } else if (a == "--input") {
      input = value();
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "kiln quant-report: unknown option '%s'\n\n%s", a.c_str(), kHelp);
      return 2;
    } else if (int8_path.empty()) {
      int8_path = a;
    } else {
      std::fprintf(stderr, "kiln quant-report: unexpected argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (int8_path.empty() || reference_path.empty() || input.empty()) {
    std::fprintf(stderr, "kiln quant-report: INT8.kiln, --reference and --input are required\n\n%s",
                 kHelp);
    return 2;
  }
  auto q = rt::Model::load(int8_path);
  auto f = rt::Model::load(reference_path);
  KILN_CHECK(q->inputs().size() == 1 && f->inputs().size() == 1, "quant-report",
             "expected models with one input, got ", q->inputs().size(), " and ",
             f->inputs().size());
  const rt::TensorSpec& in = q->inputs()[0];
  KILN_CHECK(f->inputs()[0].shape == in.shape && f->inputs()[0].dtype == in.dtype, "quant-report",
             "the reference takes ", f->inputs()[0].dtype, " ", f->inputs()[0].shape,
             ", the int8 model ", in.dtype, " ", in.shape);
  KILN_CHECK(q->outputs().size() == f->outputs().size(), "quant-report", "the int8 model has ",
             q->outputs().size(), " outputs, the reference ", f->outputs().size());
  const std::vector<Tensor> batches =
      read_batches(input, in.shape, in.dtype, "quant-report", "--input");
  rt::Session qs(q), fs(f);
  const size_t outputs = q->outputs().size();
  std::vector<quant::Sqnr> errors(outputs);
  std::vector<int64_t> agree(outputs), rows(outputs);
  for (const Tensor& b : batches) {
    const auto qo = qs.run({b.impl()});
    const auto fo = fs.run({b.impl()});
    for (size_t k = 0; k < outputs; ++k) {
      const Tensor r = Tensor(fo[k]).to(DType::Float32).contiguous();
      const Tensor t = Tensor(qo[k]).to(DType::Float32).contiguous();
      KILN_CHECK(r.sizes() == t.sizes(), "quant-report", "output ", k, ": the reference gives ",
                 r.sizes(), ", the int8 model ", t.sizes());
      errors[k].add(r, t);
      const float* a = r.data_ptr<float>();
      const float* c = t.data_ptr<float>();
      if (r.dim() == 2 && r.size(1) > 1) {
        for (int64_t i = 0; i < r.size(0); ++i) {
          agree[k] +=
              argmax_row(a + i * r.size(1), r.size(1)) == argmax_row(c + i * r.size(1), r.size(1));
          ++rows[k];
        }
      }
    }
  }
  namespace fs_ = std::filesystem;
  std::printf("%s (%.1f MB) against %s (%.1f MB): %.2fx the size; %zu batches of %s\n",
              int8_path.c_str(), fs_::file_size(int8_path) / 1e6, reference_path.c_str(),
              fs_::file_size(reference_path) / 1e6,
              double(fs_::file_size(int8_path)) / double(fs_::file_size(reference_path)),
              batches.size(), input.c_str());
  for (size_t k = 0; k < outputs; ++k) {
    std::printf("  output %zu (%s): SQNR %.1f dB", k, q->outputs()[k].name.c_str(), errors[k].db());
    if (rows[k] > 0)
      std::printf(", top-1 agreement %.1f%% (%lld of %lld)", 100.0 * agree[k] / rows[k],
                  static_cast<long long>(agree[k]), static_cast<long long>(rows[k]));
    std::printf("\n");
  }
  for (const auto& [key, value] : q->metadata()) {
    if (key != "quant.sqnr") continue;
    std::printf(
        "per layer, recorded when quantized (float32 simulation of the integer layers), "
        "%s",
        value.c_str());
  }
  return 0;
}

}  // namespace kiln::cli
