#include "runtime/profile_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

namespace flick {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One tag type per op of the X-macro, so Cost<tag> can be specialised for
// the ops whose FLOPs are counted.
#define FLICK_PROFILE_TAG(ret, name, params, args)   \
  struct name##_op {                                 \
    static constexpr std::string_view kName = #name; \
  };
FLICK_OP_LIST(FLICK_PROFILE_TAG)
#undef FLICK_PROFILE_TAG

// The table row an op call is recorded under and its FLOPs (multiply and add
// counted apart; int8 ops for INT8 layers). Linear layers and attention get
// a row per shape, the level at which their efficiency differs. Masked-out
// attention work is counted too: the figure is of the dense problem.
struct OpCost {
  std::string label;
  double flops = 0;
};

template <class Op>
struct Cost {
  template <class... A>
  static OpCost of(const A&...) {
    return {std::string(Op::kName), 0};
  }
};

template <>
struct Cost<linear_op> {
  // "linear.int8 1536->8960": precision, in -> out features.
  static OpCost of(const Tensor&, const PackedLinear& w, const Tensor& y, Activation) {
    return {std::string("linear.") + precision_name(w.precision()) + " " +
                std::to_string(w.in_features()) + "->" + std::to_string(w.out_features()),
            2.0 * static_cast<double>(y.numel()) * static_cast<double>(w.in_features())};
  }
};

template <>
struct Cost<mlp_relu_op> {
  // "mlp_relu.bf16 2->256->8": l1's precision, in -> hidden -> out features.
  static OpCost of(const Tensor&, const PackedLinear& l1, const PackedLinear& l2, const Tensor&,
                   const Tensor& y) {
    const double rows = static_cast<double>(y.numel() / l2.out_features());
    return {std::string("mlp_relu.") + precision_name(l1.precision()) + " " +
                std::to_string(l1.in_features()) + "->" + std::to_string(l1.out_features()) + "->" +
                std::to_string(l2.out_features()),
            2.0 * rows *
                static_cast<double>(l1.in_features() * l1.out_features() +
                                    l2.in_features() * l2.out_features())};
  }
};

template <>
struct Cost<matmul_op> {
  // a: [Bt, M, K], c: [Bt, M, N].
  static OpCost of(const Tensor& a, const Tensor&, const Tensor& c) {
    return {"matmul", 2.0 * static_cast<double>(c.numel()) * static_cast<double>(a.dim(-1))};
  }
};

template <>
struct Cost<conv_op> {
  // "conv.bf16 3x3/2 dw 96->96 @126": precision, kernel / stride, depthwise or
  // grouped, in -> out channels, output width.
  // w: [O, I / groups, *kernel]; every output element is one dot over w's row.
  static OpCost of(const Tensor&, const PackedConv& w, const Tensor& y, Activation) {
    const ConvDesc& d = w.desc();
    const Tensor& wt = d.w;
    const double per_out = static_cast<double>(wt.numel()) / static_cast<double>(wt.dim(0));
    const int sd = d.spatial_dims;
    std::string name = std::string("conv.") + precision_name(d.precision) + " ";
    for (int i = 0; i < sd; ++i) name += (i ? "x" : "") + std::to_string(wt.dim(2 + i));
    if (d.stride[0] != 1 || d.stride[sd - 1] != 1) name += "/" + std::to_string(d.stride[sd - 1]);
    const int64_t in = wt.dim(1) * d.groups;
    if (d.groups > 1) name += d.groups == in ? " dw" : " g" + std::to_string(d.groups);
    name += " " + std::to_string(in) + "->" + std::to_string(wt.dim(0)) + " @" +
            std::to_string(y.dim(-1));
    return {name, 2.0 * static_cast<double>(y.numel()) * per_out};
  }
};

template <>
struct Cost<attention_op> {
  // "attention 1x2640x5280": batch x queries x keys. q: [B, Lq, H, D],
  // k: [B, Lk, H, D]: Q K^T and P V, 2 Lq Lk D each per head.
  static OpCost of(const Tensor& q, const Tensor& k, const Tensor&, const Tensor&,
                   const AttentionParams&) {
    return {"attention " + std::to_string(q.dim(0)) + "x" + std::to_string(q.dim(1)) + "x" +
                std::to_string(k.dim(1)),
            4.0 * static_cast<double>(q.numel()) * static_cast<double>(k.dim(1))};
  }
};

template <>
struct Cost<attention_int8_op> {
  // As attention (the dense problem's operations, half of them int8).
  static OpCost of(const Tensor& q, const Tensor& k, const Tensor&, const Tensor&,
                   const AttentionParams&) {
    return {"attention_int8 " + std::to_string(q.dim(0)) + "x" + std::to_string(q.dim(1)) + "x" +
                std::to_string(k.dim(1)),
            4.0 * static_cast<double>(q.numel()) * static_cast<double>(k.dim(1))};
  }
};

std::string format_row(std::string_view name, int64_t calls, double seconds, double wall,
                       double flops, double inclusive) {
  char rate[32] = "";
  if (flops > 0 && seconds > 0) std::snprintf(rate, sizeof rate, "%10.1f", flops / seconds * 1e-9);
  char calls_s[24] = "", per_call[24] = "";
  if (calls > 0) {
    std::snprintf(calls_s, sizeof calls_s, "%7lld", static_cast<long long>(calls));
    std::snprintf(per_call, sizeof per_call, "%10.3f", seconds / static_cast<double>(calls) * 1e3);
  }
  char incl[24] = "";
  if (inclusive > seconds) std::snprintf(incl, sizeof incl, "%10.3f", inclusive);
  char line[256];
  std::snprintf(line, sizeof line, "  %-28.*s %7s %10.3f %10s %7.1f %10s %10s\n",
                static_cast<int>(name.size()), name.data(), calls_s, seconds, per_call,
                wall > 0 ? 100.0 * seconds / wall : 0.0, rate, incl);
  return line;
}

}  // namespace

ProfileStats ProfileStats::minus(const ProfileStats& earlier) const {
  ProfileStats d;
  d.since = earlier.until;
  d.until = until;
  for (const auto& [name, e] : entries) {
    ProfileEntry r = e;
    if (auto it = earlier.entries.find(name); it != earlier.entries.end()) {
      r.calls -= it->second.calls;
      r.seconds -= it->second.seconds;
      r.flops -= it->second.flops;
      r.inclusive -= it->second.inclusive;
    }
    if (r.calls > 0) d.entries.emplace(name, r);
  }
  return d;
}

std::string ProfileStats::table(std::string_view title) const {
  const double wall = seconds_between(since, until);
  std::vector<std::pair<std::string_view, const ProfileEntry*>> rows;
  double recorded = 0;
  for (const auto& [name, e] : entries) {
    rows.emplace_back(name, &e);
    recorded += e.seconds;
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second->seconds > b.second->seconds; });
  std::string out = "profile: " + std::string(title) + "\n";
  char head[256];
  std::snprintf(head, sizeof head, "  %-28s %7s %10s %10s %7s %10s %10s\n", "op / [section]",
                "calls", "seconds", "ms/call", "% wall", "GFLOP/s", "incl. s");
  out += head;
  for (const auto& [name, e] : rows)
    out += format_row(name, e->calls, e->seconds, wall, e->flops, e->inclusive);
  out += format_row("(outside ops)", 0, std::max(0.0, wall - recorded), wall, 0, 0);
  out += format_row("wall", 0, wall, wall, 0, 0);
  return out;
}

ProfileBackend::ProfileBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {
  FLICK_CHECK(inner_ != nullptr, "ProfileBackend: no backend to wrap");
  reset();
}

template <class Fn>
auto ProfileBackend::timed(std::string_view name, double flops, Fn&& fn) {
  const Clock::time_point start = Clock::now();
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    const double t = seconds_between(start, Clock::now());
    record(name, t, t, flops);
  } else {
    auto result = fn();
    const double t = seconds_between(start, Clock::now());
    record(name, t, t, flops);
    return result;
  }
}

#define FLICK_PROFILE_DEFINE(ret, name, params, args)                                       \
  ret ProfileBackend::name params {                                                         \
    const OpCost op_cost = Cost<name##_op>::of args;                                        \
    return timed(op_cost.label, op_cost.flops, [&]() -> ret { return inner_->name args; }); \
  }
FLICK_OP_LIST(FLICK_PROFILE_DEFINE)
#undef FLICK_PROFILE_DEFINE

void ProfileBackend::record(std::string_view name, double seconds, double inclusive, double flops) {
  auto it = stats_.entries.find(name);
  if (it == stats_.entries.end())
    it = stats_.entries.emplace(std::string(name), ProfileEntry{}).first;
  ++it->second.calls;
  it->second.seconds += seconds;
  it->second.inclusive += inclusive;
  it->second.flops += flops;
  if (!open_.empty()) open_.back() += seconds;
}

ProfileStats ProfileBackend::stats() const {
  ProfileStats s = stats_;
  s.until = Clock::now();
  return s;
}

void ProfileBackend::reset() {
  FLICK_CHECK(open_.empty(), "ProfileBackend::reset inside a ProfileScope");
  stats_ = ProfileStats{};
  stats_.since = stats_.until = Clock::now();
}

void ProfileBackend::begin_section() { open_.push_back(0); }

void ProfileBackend::end_section(std::string_view name, double seconds) {
  FLICK_CHECK(!open_.empty(), "ProfileBackend: end_section without begin_section");
  const double inside = open_.back();
  open_.pop_back();
  // Exclusive time under the section's name; record() charges that to the
  // enclosing section (if any), which also sees the ops inside as inside.
  std::string label = "[";
  label.append(name).append("]");
  record(label, std::max(0.0, seconds - inside), seconds, 0);
  if (!open_.empty()) open_.back() += inside;
}

bool profiling_enabled() {
  const char* v = std::getenv("FLICK_PROFILE");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

std::unique_ptr<Backend> profile_if_enabled(std::unique_ptr<Backend> backend) {
  if (!profiling_enabled()) return backend;
  return std::make_unique<ProfileBackend>(std::move(backend));
}

ProfileBackend* as_profiler(Backend& backend) { return dynamic_cast<ProfileBackend*>(&backend); }

ProfileScope::ProfileScope(Backend& backend, const char* name)
    : profiler_(as_profiler(backend)), name_(name) {
  if (profiler_ != nullptr) {
    profiler_->begin_section();
    start_ = Clock::now();
  }
}

ProfileScope::~ProfileScope() {
  if (profiler_ != nullptr) profiler_->end_section(name_, seconds_between(start_, Clock::now()));
}

}  // namespace flick
