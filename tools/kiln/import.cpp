// `kiln import MODEL.onnx [--input-shape [NAME=]S]... [--name N] [--no-optimize] -o M.kiln`:
// reads an ONNX model (kiln::onnx), evaluates its graph under the tracer on inputs of the given
// shapes (the model's own where it fixes them), so the graph is recorded in the kiln dialect with
// its float initializers as named weights, then runs the inference pipeline and writes the
// artifact (with its module, so `kiln compile M.kiln` works). `kiln export MODEL.onnx` is the same.

#include "import.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/jit/import_onnx.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "native_code_arg.h"
#include "quantize.h"
#include "shape_arg.h"

namespace kiln::cli {
namespace {

const char* kHelp =
    "usage: kiln import MODEL.onnx [--input-shape [NAME=]N,C,H,W]...\n"
    "                   [--quantize int8 --calibration X.npy | --quantize dynamic] -o OUT.kiln\n\n"
    "Imports an ONNX model (opset <= 17, IR version <= 8; initializers inline or as external\n"
    "data beside the model), traces it into the kiln dialect, runs the inference pipeline and\n"
    "writes a .kiln artifact that `kiln run`, kiln_runtime and `kiln compile` take.\n\n"
    "options:\n"
    "  --input-shape S   the shape of an input whose dims the model leaves open (NAME=S, or S\n"
    "                    alone for the first such input); repeat per input\n"
    "  --name NAME       model name stored in the artifact (default: the file's stem)\n"
    "  --no-optimize     write the trace as is (no pass pipeline)\n"
    "  -o, --output FILE where to write the artifact (required)\n";

std::string help() {
  return std::string(kHelp) + kNativeCodeHelp + kQuantizeHelp;
}

}  // namespace

int import_onnx(int argc, char** argv) {
  std::string input, output, name;
  std::vector<std::string> shapes, native_code;
  bool optimize = true;
  QuantizeArgs quantize;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      KILN_CHECK(i + 1 < argc, "", "option ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      return 0;
    } else if (a == "--input-shape") {
      shapes.push_back(value());
    } else if (a == "-o" || a == "--output") {
      output = value();
    } else if (a == "--name") {
      name = value();
    } else if (a == "--no-optimize") {
      optimize = false;
    } else if (a == "--native-code") {
      native_code.push_back(value());
    } else if (parse_quantize_arg(a, value, quantize)) {
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "kiln import: unknown option '%s'\n\n%s", a.c_str(), help().c_str());
      return 2;
    } else if (input.empty()) {
      input = a;
    } else {
      std::fprintf(stderr, "kiln import: unexpected argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (input.empty() || output.empty()) {
    std::fprintf(stderr, "kiln import: MODEL.onnx and -o are required\n\n%s", help().c_str());
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  jit::OnnxImportOptions options;
  for (const auto& s : shapes) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos)
      options.shapes.push_back(parse_shape_arg(s));
    else
      options.input_shapes[s.substr(0, eq)] = parse_shape_arg(s.substr(eq + 1));
  }
  KILN_CHECK(quantize.calibration.empty() || !quantize.scheme.empty(), "import",
             "--calibration is for --quantize int8");
  jit::OnnxImport imported = jit::import_onnx(input, options);
  jit::SaveOptions so =
      imported.save_options(name.empty() ? std::filesystem::path(input).stem().string() : name);
  so.optimize = optimize;
  so.native_code = native_code;
  so.metadata.emplace_back("onnx", std::filesystem::path(input).filename().string());
  if (!quantize.scheme.empty())
    imported.traced = quantize_traced(std::move(imported.traced), quantize, "import", so.metadata);
  jit::save(imported.traced, output, so);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s (%lld ONNX nodes, opset %lld, %.2f s)\n", output.c_str(),
              static_cast<long long>(imported.num_nodes), static_cast<long long>(imported.opset),
              s);
  return 0;
}

}  // namespace kiln::cli
