// The composition root of the dispatcher: the ONE place that names every compiled-in backend. It
// defines the built-in ops, lets each backend register its kernels, then puts autograd and
// autocast above them. It sits at the top of the engine (api/) because it is the one file that
// sees every layer; adding a backend = its folder + one line here.
#include "engine/amp/autocast.h"
#include "engine/autograd/autograd.h"
#include "engine/backends/cpu/kernels.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::backends {
// Each optional backend provides this function; its stub (when compiled out) registers nothing.
void register_cuda_backend(dispatch::Dispatcher& d);
// The reference accelerator (always built): engine/backends/openreg.
void register_openreg_backend(dispatch::Dispatcher& d);
}  // namespace tb::backends

namespace tb::dispatch {

void register_all() {
  Dispatcher& d = Dispatcher::raw();
  ops::define_builtin_ops(d);
  cpu::register_cpu_kernels(d);
  backends::register_cuda_backend(d);
  backends::register_openreg_backend(d);
  autograd::register_autograd(d);  // the layer above every backend
  amp::register_autocast(d);       // the layer above autograd (active under an AutocastGuard)
}

}  // namespace tb::dispatch
