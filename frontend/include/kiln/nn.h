#pragma once
// kiln::nn — modules, layers and initializers (torch.nn). #include <kiln/nn.h>

#include "kiln/nn/activation.h"
#include "kiln/nn/container.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/loss.h"
#include "kiln/nn/module.h"
#include "kiln/nn/normalization.h"
#include "kiln/nn/pooling.h"
#include "kiln/nn/rnn.h"
#include "kiln/nn/transformer.h"
