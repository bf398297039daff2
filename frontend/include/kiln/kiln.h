#pragma once
// kiln's public eager API: #include <kiln/kiln.h>.

#include "kiln/runtime/dtype.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/version.h"
