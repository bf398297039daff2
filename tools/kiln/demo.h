#pragma once

namespace kiln::cli {
// `kiln demo [options]`; returns the process exit code.
int demo(int argc, char** argv);
}  // namespace kiln::cli
