// SHA-256 moved to runtime/ (the plan cache in flick_core hashes with it too).
#pragma once

#include "runtime/sha256.h"
