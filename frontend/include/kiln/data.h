#pragma once
// kiln::data: datasets, transforms, the MNIST/IDX reader and the DataLoader.
#include "kiln/data/dataloader.h"
#include "kiln/data/dataset.h"
#include "kiln/data/mnist.h"
#include "kiln/data/transforms.h"
