#pragma once
// Several processes training one model: process groups and their collectives, data-parallel
// training. See docs/distributed.md.

#include "kiln/distributed/data_parallel.h"
#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"
