#pragma once
// `kiln quant-report INT8.kiln --reference FP32.kiln --input X.npy` (runtime only).

namespace kiln::cli {
// argv holds the arguments after "quant-report". Returns the exit code.
int quant_report(int argc, char** argv);
}  // namespace kiln::cli
