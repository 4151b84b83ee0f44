// Forbidden: ops may not include train (an upward edge).
#include "engine/train/trainer.h"
