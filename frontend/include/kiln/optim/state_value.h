#pragma once
// Optimizer state dicts as kiln::Value trees, so kiln::save / kiln::load store them like module
// state dicts: {"state": {"0": {...}, ...}, "param_groups": [{"params": [...], "options": {...}}]}
// (PyTorch's layout).

#include "kiln/optim/optimizer.h"
#include "kiln/serialize.h"

namespace kiln::optim {

Value to_value(const OptimizerStateDict& dict);
OptimizerStateDict state_dict_from_value(const Value& value);

}  // namespace kiln::optim
