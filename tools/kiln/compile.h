#pragma once
// `kiln compile`: ahead-of-time native code for a traced model (exe, so + header, obj).

namespace kiln::cli {
// argv holds the arguments after "compile". Returns the exit code.
int compile(int argc, char** argv);
}  // namespace kiln::cli
