// All-reduce bandwidth of a process group (engine/dist), run under mpirun:
//
//   mpirun -np 2 build/release/bench/dist_allreduce [--iters N] [--backend mpi|nccl]
//
// --backend nccl all-reduces CUDA tensors on each rank's GPU (also started alone: world size 1);
// its "memcpy" column is then a device-to-device copy of the buffer (copy_, synchronised).
// For float32 buffers of 4 KiB .. 64 MiB: the median time of a sum all-reduce over N iterations
// (after warm-up), its algorithm bandwidth (bytes / time) and bus bandwidth (algbw x 2(n-1)/n,
// nccl-tests' definition in its doc/PERFORMANCE.md: what each rank's links carry, comparable
// across rank counts), beside the memcpy bandwidth of one buffer of that size on this machine.
// Rank 0 prints the table. Results: docs/benchmarks.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/dist/process_group.h"

namespace {

using Clock = std::chrono::steady_clock;
using tb::core::ScalarType;
using tb::core::Tensor;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  std::string backend = "mpi";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--iters") iters = std::max(3, std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--backend") backend = argv[i + 1];
  }
  try {
    auto g = tb::dist::make_process_group({backend, 120});
    const tb::core::Device device = g->device();
    const int n = g->size();
    if (g->rank() == 0)
      std::printf(
          "%s on %s, ranks %d, %d iterations per size (median)\n%10s %12s %12s %12s %12s %8s\n",
          g->backend(), device.str().c_str(), n, iters, "bytes", "time_us", "algbw_GB/s",
          "busbw_GB/s", "memcpy_GB/s", "bus/mc");
    for (std::int64_t bytes = 4096; bytes <= (std::int64_t{64} << 20); bytes *= 4) {
      const std::int64_t count = bytes / 4;
      Tensor t = Tensor::empty({count}, ScalarType::Float32, device);
      t.fill_(1.0);
      std::vector<double> us;
      for (int it = 0; it < iters + 3; ++it) {
        g->barrier();
        const auto t0 = Clock::now();
        g->all_reduce(t, tb::dist::ReduceOp::kSum, "bench");
        const double d = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (it >= 3) us.push_back(d);
      }
      // Every rank's median; the slowest is the collective's time.
      Tensor m = Tensor::empty({1}, ScalarType::Float64);
      *m.data_ptr<double>() = median(us);
      g->all_reduce(m, tb::dist::ReduceOp::kMax);
      const double time_us = *m.data_ptr<double>();
      std::vector<double> mc;
      if (device.is_cpu()) {
        std::vector<char> a(static_cast<std::size_t>(bytes), 1);
        std::vector<char> b(static_cast<std::size_t>(bytes), 0);
        for (int it = 0; it < iters + 3; ++it) {
          const auto t0 = Clock::now();
          std::memcpy(b.data(), a.data(), a.size());
          const double d = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          if (it >= 3) mc.push_back(d);
          a[static_cast<std::size_t>(it) % a.size()] = static_cast<char>(b[0] + 1);
        }
      } else {
        Tensor b = Tensor::empty({count}, ScalarType::Float32, device);
        for (int it = 0; it < iters + 3; ++it) {
          const auto t0 = Clock::now();
          b.copy_(t);
          (void)b.narrow(0, count - 1, 1).item();  // waits for the copy
          const double d = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          if (it >= 3) mc.push_back(d);
        }
      }
      const double algbw = static_cast<double>(bytes) / (time_us * 1e3);
      const double busbw = algbw * 2.0 * (n - 1) / n;
      const double mcbw = static_cast<double>(bytes) / (median(mc) * 1e3);
      if (g->rank() == 0)
        std::printf("%10lld %12.1f %12.2f %12.2f %12.2f %8.2f\n", static_cast<long long>(bytes),
                    time_us, algbw, busbw, mcbw, busbw / mcbw);
    }
    g.reset();
    tb::dist::finalize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    tb::dist::abort_world(1);
    return 1;
  }
  return 0;
}
