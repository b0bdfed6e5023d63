// The emulator's stand-in (cuda_emulator.h).
#pragma once
#include "cuda_runtime_api.h"
