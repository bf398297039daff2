#pragma once
// All NN kernels: convolutions, pooling, normalization, embedding/dropout and losses.
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/embedding.h"
#include "kiln/runtime/kernels/loss.h"
#include "kiln/runtime/kernels/norm.h"
#include "kiln/runtime/kernels/pool.h"
