#pragma once
// `kiln import MODEL.onnx -o M.kiln`: an ONNX model traced into the kiln dialect and saved.

namespace kiln::cli {
// argv holds the arguments after "import". Returns the exit code.
int import_onnx(int argc, char** argv);
}  // namespace kiln::cli
