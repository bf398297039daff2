// `kiln export MODEL --input-shape 1,3,224,224 [--weights W.safetensors] -o m.kiln`: build a zoo
// model, load its weights, trace its eval-mode forward, optimize and write the artifact.

#include <cstdio>
#include <string>

#include "artifact_commands.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "native_code_arg.h"
#include "quantize.h"
#include "shape_arg.h"
#if KILN_HAVE_ONNX
#include "import.h"
#endif

namespace kiln::cli {
namespace {

const char* kHelp =
    "usage: kiln export MODEL --input-shape N,C,H,W [--weights W.safetensors]\n"
    "                   [--quantize int8 --calibration X.npy | --quantize dynamic] -o OUT.kiln\n"
    "       kiln export MODEL.onnx [--input-shape S] -o OUT.kiln   (as `kiln import`)\n\n"
    "Builds a zoo model, loads its weights, traces its eval-mode forward, runs the inference\n"
    "pipeline and writes a .kiln artifact that `kiln run` and kiln_runtime load.\n\n"
    "models: mlp (784-256-10), lenet, resnet18, resnet34, resnet50, mobilenet_v2,\n"
    "        transformer (vocab 1000, 10 classes; int64 token input), lstm (same)\n\n"
    "options:\n"
    "  --input-shape S   comma-separated input shape (required)\n"
    "  --weights FILE    .safetensors state dict (default: random init, with a warning)\n"
    "  --num-classes N   classifier outputs (default: 1000 for resnet/mobilenet, else 10)\n"
    "  --name NAME       model name stored in the artifact (default: MODEL)\n"
    "  --no-embed-ir     leave out the module's MLIR bytecode (stored by default, so that\n"
    "                    `kiln compile OUT.kiln` can compile the artifact to native code)\n"
    "  --no-optimize     write the trace as is (no pass pipeline, no memory planning)\n"
    "  --mbconv-min-bytes N  fuse inverted-residual blocks (MobileNetV2) whose expanded tensor\n"
    "                    has at least N bytes into one cache-resident kernel (default: the\n"
    "                    CPU's L2 size, KILN_CPU or the host; a block without an expansion\n"
    "                    needs a quarter of its L3 whatever N is)\n"
    "  -o, --output FILE where to write the artifact (required)\n";

std::string help() {
  return std::string(kHelp) + kNativeCodeHelp + kQuantizeHelp;
}

std::shared_ptr<nn::Module> build(const std::string& name, int64_t classes, bool& tokens) {
  tokens = false;
  if (name == "mlp") return models::mlp({784, 256, classes < 0 ? 10 : classes});
  if (name == "lenet") return models::lenet(classes < 0 ? 10 : classes);
  if (name == "resnet18") return models::resnet18(classes < 0 ? 1000 : classes);
  if (name == "resnet34") return models::resnet34(classes < 0 ? 1000 : classes);
  if (name == "resnet50") return models::resnet50(classes < 0 ? 1000 : classes);
  if (name == "mobilenet_v2") return models::mobilenet_v2(classes < 0 ? 1000 : classes);
  tokens = true;
  if (name == "transformer")
    return models::transformer_classifier(1000, classes < 0 ? 10 : classes);
  if (name == "lstm") return models::lstm_classifier(1000, classes < 0 ? 10 : classes);
  fail("export", "unknown model '", name,
       "' (mlp, lenet, resnet18, resnet34, resnet50, mobilenet_v2, transformer, lstm)");
}

}  // namespace

int export_model(int argc, char** argv) {
  // An .onnx model is imported (the options `kiln import` takes).
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.size() > 5 && a.compare(a.size() - 5, 5, ".onnx") == 0) {
#if KILN_HAVE_ONNX
      return import_onnx(argc, argv);
#else
      fail("export", "'", a, "': this kiln was built without ONNX import (libonnx-dev, protobuf)");
#endif
    }
  }
  std::string model_name, weights, output, shape, name;
  std::vector<std::string> native_code;
  int64_t classes = -1, mbconv_min_bytes = -1;
  bool embed_ir = true, optimize = true;
  QuantizeArgs quantize;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      KILN_CHECK(i + 1 < argc, "export", "option ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      return 0;
    } else if (a == "--weights") {
      weights = value();
    } else if (a == "--input-shape") {
      shape = value();
    } else if (a == "-o" || a == "--output") {
      output = value();
    } else if (a == "--num-classes") {
      classes = std::stoll(value());
    } else if (a == "--name") {
      name = value();
    } else if (a == "--embed-ir") {  // the default; accepted for older scripts
      embed_ir = true;
    } else if (a == "--no-embed-ir") {
      embed_ir = false;
    } else if (a == "--native-code") {
      native_code.push_back(value());
    } else if (a == "--no-optimize") {
      optimize = false;
    } else if (parse_quantize_arg(a, value, quantize)) {
    } else if (a == "--mbconv-min-bytes") {
      mbconv_min_bytes = std::stoll(value());
      KILN_CHECK(mbconv_min_bytes >= 0, "export", "--mbconv-min-bytes: expected >= 0, got ",
                 mbconv_min_bytes);
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "kiln export: unknown option '%s'\n\n%s", a.c_str(), help().c_str());
      return 2;
    } else if (model_name.empty()) {
      model_name = a;
    } else {
      std::fprintf(stderr, "kiln export: unexpected argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (model_name.empty() || shape.empty() || output.empty()) {
    std::fprintf(stderr, "kiln export: MODEL, --input-shape and -o are required\n\n%s",
                 help().c_str());
    return 2;
  }
  bool tokens = false;
  std::shared_ptr<nn::Module> module = build(model_name, classes, tokens);
  if (weights.empty()) {
    std::fprintf(stderr, "kiln export: warning: no --weights given, using random initialization\n");
  } else {
    nn::StateDict dict;
    for (auto& [k, t] : read_safetensors(weights)) dict.insert(k, t);
    module->load_state_dict(dict);
  }
  module->eval();
  const std::vector<int64_t> dims = parse_shape_arg(shape);
  Tensor x = tokens ? randint(0, 1000, dims) : randn(dims);

  autograd::NoGradGuard no_grad;
  jit::TraceOptions options;
  for (const auto& [k, t] : module->named_parameters()) options.named_captures.push_back({k, t});
  for (const auto& [k, t] : module->named_buffers()) options.named_captures.push_back({k, t});
  options.warn_on_read_back = false;
  KILN_CHECK(quantize.calibration.empty() || !quantize.scheme.empty(), "export",
             "--calibration is for --quantize int8");
  jit::TracedFunction traced = jit::trace(
      [&](const TensorList& in) { return TensorList{module->forward(in[0])}; }, {x}, options);
  jit::SaveOptions so;
  so.name = name.empty() ? model_name : name;
  so.producer = "kiln export";
  so.embed_mlir_bytecode = embed_ir;
  so.optimize = optimize;
  so.mbconv_min_bytes = mbconv_min_bytes;
  so.native_code = native_code;
  so.input_names = {tokens ? "tokens" : "x"};
  so.output_names = {"logits"};
  so.metadata = {{"model", model_name}, {"weights", weights.empty() ? "random" : weights}};
  if (!quantize.scheme.empty())
    traced = quantize_traced(std::move(traced), quantize, "export", so.metadata);
  jit::save(traced, output, so);
  std::printf("wrote %s (%s, input %s%s)\n", output.c_str(), model_name.c_str(), shape.c_str(),
              quantize.scheme.empty()        ? ""
              : quantize.scheme == "dynamic" ? ", dynamic int8"
                                             : ", int8");
  return 0;
}

}  // namespace kiln::cli
