#pragma once
// kiln::optim: optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, LBFGS) and learning-rate
// schedulers (StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, OneCycleLR).

#include "kiln/optim/adagrad.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/lbfgs.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/state_value.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/sgd.h"
