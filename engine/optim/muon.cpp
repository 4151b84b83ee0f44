#include "engine/optim/muon.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/core/metric_names.h"
#include "engine/core/thread_pool.h"
#include "engine/ops/ops.h"
#include "engine/optim/registry.h"
#include "engine/optim/sgd_adam.h"

namespace tb::optim {

using core::DimVector;
using core::ScalarType;

namespace {

// Polar Express (arXiv 2505.16932, degree 5): per-iteration (a, b, c); the paper divides all
// but the last by (1.01, 1.01^3, 1.01^5) for bf16 safety; the last repeats afterwards.
constexpr double kPolarExpress[][3] = {
    {8.28721201814563, -23.595886519098837, 17.300387312530933},
    {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
    {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
    {3.3184196573706015, -2.488488024314874, 0.51004894012372},
    {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
    {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
    {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
    {1.875, -1.25, 0.375},
};
constexpr int kPolarExpressCount = sizeof(kPolarExpress) / sizeof(kPolarExpress[0]);

}  // namespace

std::array<double, 3> ns_coefficients(const std::string& schedule, int i,
                                      const std::array<double, 3>& constant) {
  if (schedule == "default" || schedule.empty()) return constant;
  if (schedule == "polar_express") {
    if (i >= kPolarExpressCount - 1) {
      const auto& c = kPolarExpress[kPolarExpressCount - 1];
      return {c[0], c[1], c[2]};
    }
    const auto& c = kPolarExpress[i];
    const double s = 1.01;
    return {c[0] / s, c[1] / (s * s * s), c[2] / (s * s * s * s * s)};
  }
  throw ValueError("[muon] unknown Newton-Schulz coefficient schedule '" + schedule +
                   "' (choose default or polar_express)");
}

namespace {

// Gram Newton–Schulz (Dao-AILab/gram-newton-schulz, gram_newton_schulz.py): every iterate is
// X_k = Q_k·X_0 with Q_k a polynomial in R_0 = X_0·X_0ᵀ, so the step X ← (a·I + b·A + c·A²)·X,
// A = X·Xᵀ, becomes, on n×n matrices only,
//   Z = b·R + c·R², Q ← Q·(a·I + Z), R ← (a·I + Z)·R·(a·I + Z),
// and X = Q·X_0 at the end: 4 n³ products per iteration instead of 2 n²m + n³. A restart
// rebuilds X = Q·X and R = X·Xᵀ from it (the rounding of iterating on R alone grows). `x` is
// n×m with n < m, already normalised; returns Q·x.
Tensor gram_newton_schulz(Tensor x, const NewtonSchulzOptions& o) {
  const std::int64_t n = x.size(0);
  auto restarts_at = [&](int i) {
    return i != 0 &&
           std::find(o.gram_restarts.begin(), o.gram_restarts.end(), i) != o.gram_restarts.end();
  };
  Tensor r = ops::syrk(x);  // R = X·Xᵀ
  Tensor q;
  for (int i = 0; i < o.steps; ++i) {
    const auto [a, b, c] = ns_coefficients(o.schedule, i, o.coefficients);
    if (restarts_at(i)) {
      x = ops::mm(q, x);
      r = ops::syrk(x);
      q = Tensor();
    }
    const Tensor z = ops::add(ops::syrk(r, c), r, b);  // Z = c·R·R + b·R (R symmetric)
    if (!q.defined()) {
      q = z.clone();  // Q = a·I + Z: a added on the diagonal (a strided view of it)
      Tensor diag = q.as_strided({n}, {n + 1});
      ops::add_(diag, ops::scalar_tensor(a, q.dtype(), q.device()), 1.0);
    } else {
      q = ops::addmm(q, q, z, a, 1.0);  // Q = a·Q + Q·Z
    }
    if (i + 1 < o.steps && !restarts_at(i + 1)) {
      const Tensor rz = ops::addmm(r, r, z, a, 1.0);  // R·(a·I + Z)
      r = ops::addmm(rz, z, rz, a, 1.0);              // (a·I + Z)·R·(a·I + Z)
    }
  }
  return ops::mm(q, x);
}

}  // namespace

Tensor newton_schulz(const Tensor& g, const NewtonSchulzOptions& o) {
  TB_CHECK(o.steps < 100, "Number of steps must be less than 100 for computational efficiency");
  TB_CHECK(o.steps >= 0, "[muon] ns_steps must be >= 0, got ", o.steps);
  TB_CHECK(g.defined() && g.dim() == 2, "Input tensor gradient must be a 2D matrix");
  // bfloat16 where matrix products are fast in it (CUDA), float32 elsewhere (the CPU and openreg,
  // which then runs the CPU's arithmetic).
  ScalarType dt = o.dtype.value_or(
      g.device().type() == core::DeviceType::CUDA ? ScalarType::BFloat16 : ScalarType::Float32);
  TB_CHECK(dt == ScalarType::BFloat16 || dt == ScalarType::Float32 || dt == ScalarType::Float64,
           "[muon] Newton-Schulz runs in bfloat16, float32 or float64, got ", dt);
  Tensor x = g.to(dt);
  const bool transposed = g.size(0) > g.size(1);
  if (transposed) x = x.t();
  x = x.contiguous();
  // X / clamp(||X||_F, eps), on the device (no host read of the norm).
  const Tensor norm = ops::norm(x);
  x = ops::div(x, ops::maximum(norm, ops::scalar_tensor(o.eps, norm.dtype(), norm.device())));
  TB_CHECK(o.variant == "standard" || o.variant == "gram", "[muon] unknown Newton-Schulz variant '",
           o.variant, "' (choose standard or gram)");
  if (o.variant == "gram" && x.size(0) < x.size(1) && o.steps > 0) {
    x = gram_newton_schulz(x, o);
    return transposed ? x.t().contiguous() : x;
  }
  for (int i = 0; i < o.steps; ++i) {
    const auto [a, b, c] = ns_coefficients(o.schedule, i, o.coefficients);
    Tensor bm;
    if (o.symmetric) {
      const Tensor gram = ops::syrk(x);            // A = X·Xᵀ
      bm = ops::add(ops::syrk(gram, c), gram, b);  // B = c·A·A + b·A (A symmetric: A·A = A·Aᵀ)
    } else {
      const Tensor gram = ops::mm(x, x.t());
      bm = ops::addmm(gram, gram, gram, b, c);
    }
    x = ops::addmm(x, bm, x, a, 1.0);  // X = a·X + B·X
  }
  return transposed ? x.t().contiguous() : x;
}

double muon_adjusted_lr(double lr, const std::string& fn, std::int64_t rows, std::int64_t cols) {
  const auto a = static_cast<double>(rows);
  const auto b = static_cast<double>(cols);
  if (fn.empty() || fn == "original") return lr * std::sqrt(std::max(1.0, a / b));
  if (fn == "match_rms_adamw") return lr * 0.2 * std::sqrt(std::max(a, b));
  return lr;
}

namespace {
HyperMap muon_defaults(const MuonOptions& o) {
  return {{"lr", o.lr},
          {"weight_decay", o.weight_decay},
          {"momentum", o.momentum},
          {"nesterov", o.nesterov},
          {"adjust_lr_fn", o.adjust_lr_fn},
          {"ns_a", o.ns.coefficients[0]},
          {"ns_b", o.ns.coefficients[1]},
          {"ns_c", o.ns.coefficients[2]},
          {"ns_steps", static_cast<double>(o.ns.steps)},
          {"eps", o.ns.eps},
          {"ns_schedule", o.ns.schedule},
          {"ns_variant", o.ns.variant},
          {"flatten_conv", o.flatten_conv}};
}

// Whether the group orthogonalises filters of more than 2 dimensions flattened to
// [out, in·kh·kw]. A group restored from a checkpoint written before the option existed has no
// such key: 2-D only.
bool flattens_conv(const ParamGroup& g) {
  return g.options.count("flatten_conv") != 0 && g.flag("flatten_conv");
}

// The matrix Muon orthogonalises for `t` (a parameter, its gradient or update): `t` itself when
// 2-D, else [size(0), numel / size(0)] (a conv filter [out, in, kh, kw] as [out, in·kh·kw]).
Tensor as_matrix(const Tensor& t) {
  return t.dim() == 2 ? t : t.reshape({t.size(0), t.numel() / t.size(0)});
}
}  // namespace

Muon::Muon(std::vector<Tensor> params, const MuonOptions& options)
    : Muon(single_group(std::move(params)), options) {}

Muon::Muon(std::vector<ParamGroup> groups, const MuonOptions& options)
    : Optimizer("Muon", muon_defaults(options)), ns_(options.ns) {
  for (auto& g : groups)
    add_param_group(std::move(g));
}

void Muon::validate_group(const ParamGroup& g) const {
  const double lr = checked_lr(g);
  TB_CHECK(lr >= 0.0, "Learning rate should be >= 0 but is: ", lr);
  TB_CHECK(g.number("momentum") >= 0.0, "momentum should be >= 0 but is: ", g.number("momentum"));
  TB_CHECK(g.number("weight_decay") >= 0.0,
           "weight decay should be >= 0 but is: ", g.number("weight_decay"));
  const std::string& fn = g.text("adjust_lr_fn");
  TB_CHECK(fn.empty() || fn == "original" || fn == "match_rms_adamw",
           "Adjust learning rate function ", fn, " is not supported");
  ns_coefficients(g.text("ns_schedule"), 0, {0, 0, 0});  // validates the name
  const std::string& variant = g.text("ns_variant");
  TB_CHECK(variant == "standard" || variant == "gram", "[muon] unknown Newton-Schulz variant '",
           variant, "' (choose standard or gram)");
  const bool flatten = flattens_conv(g);
  for (const auto& p : g.params) {
    TB_CHECK(p.dim() == 2 || (flatten && p.dim() > 2 && p.size(0) > 0),
             "Muon only supports 2D parameters whereas we found a parameter with size: ",
             DimVector(p.sizes()),
             p.dim() > 2 ? " (set optimizer.muon.conv_filters = \"flatten\" to orthogonalise "
                           "convolution filters as [out, in*kh*kw] matrices)"
                         : "");
  }
}

double Muon::pending_ns_ms() {
  double total = 0.0;
  if (ns_marks_pending_ && ns_timer_) {
    // Marks come in (before, after) pairs around each call: sum the "after − before" intervals,
    // skip the gaps between calls.
    const std::vector<double> d = ns_timer_->elapsed_ms();
    for (std::size_t k = 0; k < d.size(); k += 2)
      total += d[k];
  }
  ns_marks_pending_ = false;
  return total;
}

double Muon::last_newton_schulz_ms() {
  last_ns_ms_ += pending_ns_ms();
  return last_ns_ms_;
}

void Muon::step() {
  autograd::NoGradGuard no_grad;
  (void)pending_ns_ms();  // the previous step's marks, if nobody read them
  double device_ns_ms = 0.0;
  std::chrono::steady_clock::duration ns_time{};
  for (auto& group : param_groups()) {
    const double lr = group.number("lr");
    const double wd = group.number("weight_decay");
    const double mu = group.number("momentum");
    const bool nesterov = group.flag("nesterov");
    const std::string& fn = group.text("adjust_lr_fn");
    NewtonSchulzOptions ns = ns_;
    ns.coefficients = {group.number("ns_a"), group.number("ns_b"), group.number("ns_c")};
    ns.steps = static_cast<int>(group.number("ns_steps"));
    ns.eps = group.number("eps");
    ns.schedule = group.text("ns_schedule");
    ns.variant = group.text("ns_variant");
    const bool flatten = flattens_conv(group);
    std::vector<Tensor> ps;
    std::vector<Tensor> bufs;
    std::vector<Tensor> grads;
    for (auto& p : group.params) {
      Tensor grad = autograd::grad(p);
      if (!grad.defined()) continue;
      TB_CHECK(grad.dim() == 2 || (flatten && grad.dim() > 2),
               "Param gradient must be a 2D matrix");
      if (!owner_of_.empty() && owner_of_.at(p.impl()) != partition_.rank) continue;
      ParamState& st = state(p);
      auto it = st.find("momentum_buffer");
      if (it == st.end()) it = st.emplace("momentum_buffer", ops::zeros_like(grad)).first;
      ps.push_back(p);
      bufs.push_back(it->second);
      // A buffer loaded from a checkpoint may differ in dtype from the gradient.
      grads.push_back(grad.dtype() == it->second.dtype() ? grad : grad.to(it->second.dtype()));
    }
    // buf = mu·buf + (1 − mu)·g; the update input u = (1 − mu)·g + mu·buf with Nesterov, buf
    // without: one fused pass over the group's parameters per (device, dtype).
    std::vector<Tensor> us = ops::muon_momentum_(bufs, grads, mu, nesterov);
    // Conv filters (flatten_conv): the momentum buffer keeps the filter's shape, the update is
    // orthogonalised as [out, in·kh·kw] (KellerJordan/Muon, muon.py).
    for (Tensor& u : us)
      u = as_matrix(u);
    // On the CPU with several threads and at least two matrices per thread (a transformer's
    // projections), the Newton–Schulz iterations of different matrices run side by side, each
    // on one thread with single-threaded BLAS: products of 128-wide matrices do not speed up
    // when split over threads, whole matrices do. Fewer, larger matrices (an MLP's two) keep
    // threaded products instead.
    std::vector<Tensor> orthogonal(ps.size());
    const auto n_matrices = static_cast<std::int64_t>(ps.size());
    const bool all_cpu =
        std::all_of(ps.begin(), ps.end(), [](const Tensor& p) { return p.device().is_cpu(); });
    if (all_cpu && core::num_threads() > 1 && n_matrices >= 2 * core::num_threads()) {
      const auto ns_start = std::chrono::steady_clock::now();
      const core::ScopedSingleThreadedBlas one_thread_each;
      core::parallel_for(0, n_matrices, 1, [&](std::int64_t b, std::int64_t e) {
        const autograd::NoGradGuard chunk_no_grad;  // pool threads have their own grad mode
        for (std::int64_t i = b; i < e; ++i)
          orthogonal[static_cast<std::size_t>(i)] =
              newton_schulz(us[static_cast<std::size_t>(i)], ns);
      });
      ns_time += std::chrono::steady_clock::now() - ns_start;
    }
    for (std::size_t i = 0; i < ps.size(); ++i) {
      Tensor& p = ps[i];
      // Newton–Schulz time: device events around each call on a device (read later, by
      // last_newton_schulz_ms()), the host clock on the CPU.
      core::DeviceTimer* timer = nullptr;
      if (!p.device().is_cpu()) {
        if (!ns_timer_ || ns_timer_device_ != p.device()) {
          // Parameters on another device: read this one's marks first (waits; only then).
          device_ns_ms += pending_ns_ms();
          ns_timer_ = core::make_device_timer(p.device());
          ns_timer_device_ = p.device();
        }
        timer = ns_timer_.get();
      }
      Tensor o = orthogonal[i];
      if (!o.defined()) {
        const auto ns_start = std::chrono::steady_clock::now();
        if (timer != nullptr) timer->mark();
        o = newton_schulz(us[i], ns);
        if (timer != nullptr) {
          timer->mark();
          ns_marks_pending_ = true;
        } else {
          ns_time += std::chrono::steady_clock::now() - ns_start;
        }
      }
      const double adjusted = muon_adjusted_lr(lr, fn, p.size(0), p.numel() / p.size(0));
      if (wd != 0.0) ops::mul_(p, 1.0 - lr * wd);
      ops::add_(p, (p.dim() == 2 ? o : o.reshape(p.sizes())).to(p.dtype()), -adjusted);
    }
  }
  last_ns_ms_ = std::chrono::duration<double, std::milli>(ns_time).count() + device_ns_ms;
  if (partition_.sync) partition_.sync(all_params(), partition_.owner);
  count_step();
}

std::vector<Tensor> Muon::all_params() const {
  std::vector<Tensor> out;
  for (const auto& g : param_groups())
    out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

void Muon::set_partition(MuonPartition partition) {
  const std::vector<Tensor> params = all_params();
  TB_CHECK(partition.owner.size() == params.size(), "[optimizer.muon] the partition names ",
           partition.owner.size(), " owners for ", params.size(), " parameters");
  TB_CHECK(static_cast<bool>(partition.sync), "[optimizer.muon] the partition has no sync");
  owner_of_.clear();
  for (std::size_t i = 0; i < params.size(); ++i)
    owner_of_[params[i].impl()] = partition.owner[i];
  partition_ = std::move(partition);
}

std::vector<int> assign_muon_owners(const std::vector<Tensor>& params, int world) {
  TB_CHECK(world >= 1, "[optimizer.muon] world size must be >= 1, got ", world);
  std::vector<std::size_t> order(params.size());
  std::vector<double> cost(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    order[i] = i;
    const auto m = static_cast<double>(params[i].dim() >= 1 ? params[i].size(0) : 1);
    const auto n = params[i].dim() >= 2 && m > 0 ? static_cast<double>(params[i].numel()) / m : 1.0;
    cost[i] = m * n * std::min(m, n);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  std::vector<double> load(static_cast<std::size_t>(world), 0.0);
  std::vector<int> owner(params.size(), 0);
  for (std::size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = static_cast<int>(least);
    load[static_cast<std::size_t>(least)] += cost[i];
  }
  return owner;
}

void Muon::append_step_metrics(std::vector<std::pair<std::string, double>>& out) {
  out.emplace_back(core::metric::kNewtonSchulzMs, last_newton_schulz_ms());
}

OptimizerKind muon_kind() {
  using core::FieldSpec;
  using core::FieldType;
  OptimizerKind k;
  k.name = "muon";
  k.help = "Muon for the 2-D hidden weight matrices, AdamW for the rest (torch.optim.Muon)";
  k.rest_kind = "adamw";
  k.fields = {
      // torch.optim.Muon's defaults (MuonOptions), but for weight_decay: AdamW's 0.01 rather
      // than Muon's 0.1, so that a Muon run and its AdamW twin (Queue Muon + AdamW, the shipped
      // sweep, an optimizer.kind changed by --set) differ in the optimizer only.
      FieldSpec("lr", FieldType::kFloat, MuonOptions{}.lr, "learning rate (the schedule's base)")
          .at_least(0),
      FieldSpec("weight_decay", FieldType::kFloat, AdamW::default_options().weight_decay,
                "decoupled weight decay (torch.optim.Muon's default: 0.1)")
          .at_least(0),
      FieldSpec("momentum", FieldType::kFloat, MuonOptions{}.momentum, "momentum (EMA factor)")
          .at_least(0)
          .below(1),
      FieldSpec("nesterov", FieldType::kBool, true, "Nesterov-style update input"),
      FieldSpec("eps", FieldType::kFloat, 1e-7, "Newton-Schulz normalisation: norm clamped to eps")
          .at_least(0),
      FieldSpec("adjust_lr_fn", FieldType::kString, "original", "Muon's per-matrix LR scaling")
          .one_of({"original", "match_rms_adamw"}),
      FieldSpec("ns_steps", FieldType::kInt, 5, "Newton-Schulz iterations").at_least(1),
      FieldSpec("ns_schedule", FieldType::kString, "default", "Newton-Schulz coefficients")
          .one_of({"default", "polar_express"}),
      FieldSpec("ns_dtype", FieldType::kString, "auto",
                "Newton-Schulz arithmetic (auto: bf16 on CUDA, fp32 elsewhere)")
          .one_of({"auto", "bf16", "fp32", "fp64"}),
      FieldSpec("ns_variant", FieldType::kString, "standard",
                "Newton-Schulz form: standard, or gram (iterate on the Gram matrix of a "
                "non-square update; square ones run standard)")
          .one_of({"standard", "gram"}),
      FieldSpec("conv_filters", FieldType::kString, "adamw",
                "parameters of more than 2 dimensions (convolution filters): adamw, as "
                "torch.optim.Muon (2-D only), or flatten: orthogonalised as [out, in*kh*kw] "
                "matrices (KellerJordan/Muon)")
          .one_of({"adamw", "flatten"}),
      FieldSpec("ns_gram_restarts", FieldType::kIntList, nlohmann::json::array({2}),
                "gram variant: iterations (>= 1) at which X and its Gram matrix are recomputed")};
  // Checked with the config (before a run is created), not when the optimizer is built.
  k.validate = [](const nlohmann::json& s) -> std::optional<core::FieldProblem> {
    for (const auto& it : s.at("ns_gram_restarts")) {
      const auto v = it.get<std::int64_t>();
      if (v < 1)
        return core::FieldProblem{"ns_gram_restarts",
                                  "expected iterations >= 1 (iteration 0 starts from X itself), "
                                  "found " +
                                      std::to_string(v)};
    }
    return std::nullopt;
  };
  k.make = [](std::vector<Tensor> params, const nlohmann::json& s) -> std::unique_ptr<Optimizer> {
    MuonOptions o;
    o.lr = s.at("lr").get<double>();
    o.weight_decay = s.at("weight_decay").get<double>();
    o.momentum = s.at("momentum").get<double>();
    o.nesterov = s.at("nesterov").get<bool>();
    o.adjust_lr_fn = s.at("adjust_lr_fn").get<std::string>();
    o.ns.eps = s.at("eps").get<double>();
    o.ns.steps = static_cast<int>(s.at("ns_steps").get<std::int64_t>());
    o.ns.schedule = s.at("ns_schedule").get<std::string>();
    o.ns.variant = s.at("ns_variant").get<std::string>();
    o.flatten_conv = s.at("conv_filters").get<std::string>() == "flatten";
    o.ns.gram_restarts.clear();
    for (const auto& it : s.at("ns_gram_restarts")) {
      const auto v = it.get<std::int64_t>();
      TB_CHECK(v >= 1, "[optimizer.muon] ns_gram_restarts: ", v,
               " is not an iteration >= 1 (iteration 0 starts from X itself)");
      o.ns.gram_restarts.push_back(static_cast<int>(v));
    }
    const auto dtype = s.at("ns_dtype").get<std::string>();
    if (dtype == "bf16") o.ns.dtype = ScalarType::BFloat16;
    if (dtype == "fp32") o.ns.dtype = ScalarType::Float32;
    if (dtype == "fp64") o.ns.dtype = ScalarType::Float64;
    return std::make_unique<Muon>(std::move(params), o);
  };
  return k;
}

}  // namespace tb::optim
