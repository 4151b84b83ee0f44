// Allowed: ops may include core.
#include "engine/core/tensor.h"
