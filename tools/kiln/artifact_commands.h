#pragma once
// `kiln export | run | inspect | bench`: make and use `.kiln` artifacts. Each returns the process
// exit code (0 ok, 1 failure, 2 usage error); errors go to stderr.

namespace kiln::cli {
int export_model(int argc, char** argv);  // needs MLIR (kiln_jit)
int run_artifact(int argc, char** argv);
int inspect_artifact(int argc, char** argv);
int bench_artifact(int argc, char** argv);
int train_artifact(int argc, char** argv);  // train.cpp
}  // namespace kiln::cli
