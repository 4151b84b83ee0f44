// The optimizer registry and its built-in kinds, in the order the GUI and the docs list them.
#include "engine/optim/registry.h"

namespace tb::optim {

core::Registry<OptimizerKind>& optimizer_registry() {
  static core::Registry<OptimizerKind>* registry = [] {
    auto* r = new core::Registry<OptimizerKind>("optimizer");
    r->add(adamw_kind());
    r->add(adam_kind());
    r->add(sgd_kind());
    r->add(muon_kind());
    return r;
  }();
  return *registry;
}

}  // namespace tb::optim
