// oneDNN matmul for float GEMMs (see onednn_gemm.h). Each thread keeps the primitives it has built,
// keyed by the problem, so a training step's products are built once and then only re-pointed at
// the step's buffers.
#include "engine/backends/cpu/onednn_gemm.h"

#include "engine/core/error.h"

#ifdef TB_HAVE_ONEDNN

#include <omp.h>

#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>

namespace tb::cpu::onednn {
namespace {

using dt = dnnl::memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

struct Key {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  bool operator==(const Key& o) const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta) ==
           std::tie(o.trans_a, o.trans_b, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.alpha, o.beta);
  }
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = static_cast<size_t>(key.trans_a) * 2 + static_cast<size_t>(key.trans_b);
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc}) {
      h = h * 1000003u ^ static_cast<size_t>(v);
    }
    h = h * 1000003u ^ std::hash<float>{}(key.alpha);
    return h * 1000003u ^ std::hash<float>{}(key.beta);
  }
};

// One built product: the primitive and its memory objects, re-pointed at each call's buffers.
struct Plan {
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
};

// A's, B's and C's descriptors: op(A) is m×k, op(B) k×n, C m×n, row-major with leading dimensions;
// a transposed operand is the stored matrix read with swapped strides.
Plan build(const Key& key) {
  using dims = dnnl::memory::dims;
  const dnnl::memory::desc a_md({key.m, key.k}, dt::f32,
                                key.trans_a ? dims{1, key.lda} : dims{key.lda, 1});
  const dnnl::memory::desc b_md({key.k, key.n}, dt::f32,
                                key.trans_b ? dims{1, key.ldb} : dims{key.ldb, 1});
  const dnnl::memory::desc c_md({key.m, key.n}, dt::f32, dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);  // C = alpha·A·B + beta·C
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, cpu_engine());
  dnnl::engine& engine = cpu_engine();
  return Plan{dnnl::matmul(pd), dnnl::memory(a_md, engine, nullptr),
              dnnl::memory(b_md, engine, nullptr), dnnl::memory(c_md, engine, nullptr)};
}

// Per-thread state: oneDNN on one OpenMP thread, a stream, and the plans built so far (bounded:
// a workload has a few dozen shapes; a stream of new shapes starts the cache over).
struct ThreadState {
  ThreadState() : stream(cpu_engine()) { omp_set_num_threads(1); }
  dnnl::stream stream;
  std::unordered_map<Key, Plan, KeyHash> plans;
};

constexpr size_t kMaxPlans = 256;

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

bool compiled() {
  return true;
}

std::string describe() {
  const dnnl_version_t* v = dnnl_version();
  std::string impl;
  try {
    const dnnl::memory::desc md({256, 256}, dt::f32, dnnl::memory::dims{256, 1});
    impl =
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(md, md, md), cpu_engine()).impl_info_str();
  } catch (const dnnl::error& e) {
    impl = tb::detail::str_cat("no float matmul: ", e.what());
  }
  return tb::detail::str_cat("oneDNN ", v->major, ".", v->minor, ".", v->patch, " (", impl, ")");
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const Key key{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta};
  ThreadState& state = thread_state();
  try {
    auto it = state.plans.find(key);
    if (it == state.plans.end()) {
      if (state.plans.size() >= kMaxPlans) state.plans.clear();
      it = state.plans.emplace(key, build(key)).first;
    }
    Plan& plan = it->second;
    plan.a.set_data_handle(const_cast<float*>(a));
    plan.b.set_data_handle(const_cast<float*>(b));
    plan.c.set_data_handle(c);
    plan.primitive.execute(
        state.stream, {{DNNL_ARG_SRC, plan.a}, {DNNL_ARG_WEIGHTS, plan.b}, {DNNL_ARG_DST, plan.c}});
    state.stream.wait();
  } catch (const dnnl::error& e) {
    throw InternalError(tb::detail::str_cat("[gemm] oneDNN matmul failed for m=", m, ", n=", n,
                                            ", k=", k, " (trans_a=", trans_a, ", trans_b=", trans_b,
                                            ", lda=", lda, ", ldb=", ldb, ", ldc=", ldc,
                                            "): ", e.what(), " (status ", e.status, ")"));
  }
}

}  // namespace tb::cpu::onednn

#else  // !TB_HAVE_ONEDNN

namespace tb::cpu::onednn {

bool compiled() {
  return false;
}

std::string describe() {
  return "not built";
}

void sgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
           int64_t, float, float*, int64_t) {
  throw InternalError("[gemm] the onednn backend was called in a build without oneDNN (a bug)");
}

}  // namespace tb::cpu::onednn

#endif
