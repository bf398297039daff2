#pragma once
// kiln's public eager API: #include <kiln/kiln.h>.

#include "kiln/autograd.h"
#include "kiln/control_flow.h"
#include "kiln/custom_function.h"
#include "kiln/data.h"
#include "kiln/dispatch.h"
#include "kiln/nn.h"
#include "kiln/nn_ops.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "kiln/quant.h"
#include "kiln/runtime/dtype.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/serialize.h"
#include "kiln/tensor.h"
#include "kiln/version.h"
