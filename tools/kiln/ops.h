#pragma once
// `kiln ops`: which backends run each op of the kiln dialect.

namespace kiln::cli {
// argv holds the arguments after "ops". Returns the exit code.
int ops(int argc, char** argv);
}  // namespace kiln::cli
