// A deliberately wrong dependency: the runtime may never include MLIR. The layering test expects
// cmake/check_includes.cmake to reject this file.
#include "mlir/IR/Builders.h"
