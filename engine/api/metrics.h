// The metric vocabulary for app/ and ui/: the names a run's steps are logged under (see
// engine/core/metric_names.h), so plots, reports and the CLI name them through one list.
#pragma once

#include "engine/core/metric_names.h"

namespace tb::api {
namespace metric = ::tb::core::metric;
}  // namespace tb::api
