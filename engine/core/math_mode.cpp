#include "engine/core/math_mode.h"

#include <atomic>

namespace tb::core {

namespace {
std::atomic<bool> g_allow_tf32{false};
thread_local std::optional<bool> t_allow_tf32;  // a run's amp.tf32 on its thread
}  // namespace

void set_allow_tf32(bool allow) {
  g_allow_tf32.store(allow, std::memory_order_relaxed);
}

void set_thread_allow_tf32(std::optional<bool> allow) {
  t_allow_tf32 = allow;
}

bool allow_tf32() {
  return t_allow_tf32.value_or(g_allow_tf32.load(std::memory_order_relaxed));
}

}  // namespace tb::core
