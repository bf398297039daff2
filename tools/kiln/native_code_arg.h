#pragma once
// `--native-code T` of kiln export and kiln import (jit::SaveOptions::native_code).

namespace kiln::cli {

inline constexpr const char* kNativeCodeHelp =
    "  --native-code T   also embed code generated for CPU target T (repeatable, most\n"
    "                    specialized first): host, x86-64-v3, x86-64-v4, aarch64, or\n"
    "                    TRIPLE[:CPU]. Fused elementwise chains, softmax, layer norm, row\n"
    "                    reductions and the copies of permutes and slices then run that\n"
    "                    code on a CPU it suits, the runtime's kernels elsewhere (kiln\n"
    "                    inspect lists it); a chain after a conv, linear or matmul runs\n"
    "                    inside that product on each block of its output, and a chain\n"
    "                    computing a linear's (or matmul's) input inside it, by blocks.\n"
    "                    Links with the system toolchain.\n";

}  // namespace kiln::cli
