// Grad mode: whether operations are recorded for autograd on this thread. It is the Autograd
// dispatch key's exclusion (as PyTorch's c10::GradMode / AutoGradMode sit below ATen's ops), so
// ops/ and the optimizers can switch recording off without depending on autograd/.
#pragma once

#include "engine/dispatch/dispatcher.h"

namespace tb::dispatch {

/// Whether operations are recorded on this thread (false inside a NoGradGuard).
inline bool is_grad_enabled() {
  return !tls_excluded_keys().has(DispatchKey::Autograd);
}

/// RAII: operations are not recorded on this thread while it lives (nests).
class NoGradGuard {
 public:
  NoGradGuard() : guard_(DispatchKeySet(DispatchKey::Autograd)) {}
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  ExcludeKeysGuard guard_;
};

}  // namespace tb::dispatch
