// Forbidden: the UI sees the engine through engine/api only.
#include "engine/core/tensor.h"
