// CPU emulation of the CUDA execution model, force-included (before anything else) into the CUDA
// backend's kernel files when they are compiled as C++ for the `cuda-emu` test build
// (TB_CUDA=EMULATE). A launch runs every block of the grid, one after another, on a pool of host
// threads — one thread per CUDA thread of the block — with real barriers for __syncthreads, warp
// shuffles through a per-warp exchange buffer, and atomics under a lock. Together with the
// emulated runtime and cuBLAS (emu_runtime.cpp, emu_blas.cpp) the backend's kernels, launch
// geometry and index arithmetic run in every test run on machines without a GPU. What it cannot
// show: timing, the real memory model (every launch is synchronous), and the vendor libraries'
// own behaviour (cuBLAS is emulated by a reference GEMM with cuBLAS's documented semantics).
#pragma once

// The CUDA headers' host path leaves __shared__ empty (a per-thread local): here it is a static,
// shared by the threads of the one block that runs at a time.
#define __shared__ static

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

namespace tb_emu {

/// The emulated thread's coordinates (set by the pool before the kernel body runs).
struct ThreadContext {
  dim3 thread_idx;
  dim3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
ThreadContext& context();

/// __syncthreads(): every live thread of the block.
void sync_block();

/// The value `bytes` bytes long of lane `src_lane` of the calling thread's warp, after every live
/// lane has published its own (`mine`).
void warp_exchange(const void* mine, void* out, int bytes, int src_lane);

/// Runs body() as every thread of every block of the grid (blocks in order); synchronous.
void run_grid(dim3 grid, dim3 block, const std::function<void()>& body);

/// A lock held around every emulated atomic.
void atomic_lock();
void atomic_unlock();

template <typename... P>
auto launch(dim3 grid, dim3 block, void (*kernel)(P...)) {
  return [grid, block, kernel](auto&&... args) { run_grid(grid, block, [&] { kernel(args...); }); };
}

template <typename T>
T shfl_xor(T v, int mask) {
  T out;
  const int lane = static_cast<int>(context().thread_idx.x % 32);
  warp_exchange(&v, &out, static_cast<int>(sizeof(T)), lane ^ mask);
  return out;
}

template <typename T>
T shfl(T v, int src_lane) {
  T out;
  warp_exchange(&v, &out, static_cast<int>(sizeof(T)), src_lane & 31);
  return out;
}

template <typename T, typename F>
T atomic_update(T* p, F f) {
  atomic_lock();
  const T old = *p;
  *p = f(old);
  atomic_unlock();
  return old;
}

}  // namespace tb_emu

#define threadIdx (::tb_emu::context().thread_idx)
#define blockIdx (::tb_emu::context().block_idx)
#define blockDim (::tb_emu::context().block_dim)
#define gridDim (::tb_emu::context().grid_dim)

inline void __syncthreads() {
  ::tb_emu::sync_block();
}

template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T v, int lane_mask, int /*width*/ = 32) {
  return ::tb_emu::shfl_xor(v, lane_mask);
}

template <typename T>
T __shfl_sync(unsigned /*mask*/, T v, int src_lane, int /*width*/ = 32) {
  return ::tb_emu::shfl(v, src_lane);
}

inline float atomicAdd(float* p, float v) {
  return ::tb_emu::atomic_update(p, [v](float o) { return o + v; });
}
inline double atomicAdd(double* p, double v) {
  return ::tb_emu::atomic_update(p, [v](double o) { return o + v; });
}
inline int atomicAdd(int* p, int v) {
  return ::tb_emu::atomic_update(p, [v](int o) { return o + v; });
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return ::tb_emu::atomic_update(p, [v](unsigned long long o) { return o + v; });
}
inline __half atomicAdd(__half* p, __half v) {
  return ::tb_emu::atomic_update(
      p, [v](__half o) { return __float2half(__half2float(o) + __half2float(v)); });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
  return ::tb_emu::atomic_update(p, [v](__nv_bfloat16 o) {
    return __float2bfloat16(__bfloat162float(o) + __bfloat162float(v));
  });
}
inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
  return ::tb_emu::atomic_update(p, [v](unsigned long long o) { return v < o ? v : o; });
}

using std::isfinite;
