// flick convert IN OUT --precision int8|fp8|bf16: writes a quantized copy of
// a safetensors checkpoint (one file, or a sharded *.safetensors.index.json).
//
// Every weight of a linear layer ([N, K]) or convolution ([O, I, k...],
// quantized per output channel as [O, I*k...]) named "*.weight" becomes I8 or
// F8_E4M3 with a F32 "<name>.weight_scale" beside it (architecture.md,
// runtime/quant/quantize.h); with bf16 it is rounded to BF16. Layers that stay
// in high precision across peers (norms, biases, embeddings, modulation,
// output head; see kDefaultKeep) and those matching --keep are copied
// unchanged, or to BF16 with --keep-dtype bf16. One line per tensor reports
// what was done and, for converted ones, the error against the original.
#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jobs/cli.h"
#include "runtime/quant/quantize.h"
#include "runtime/weights/safetensors.h"
#include "runtime/weights/sharded.h"

namespace flick {
namespace {

// Substrings of the tensors the peers keep in BF16/F32 (peers-perf.md §4):
// Wan / Matrix-Game (Kijai's WanVideoWrapper) and HunyuanVideo / FramePack.
constexpr const char* kDefaultKeep[] = {"norm",
                                        "bias",
                                        "patch_embedding",
                                        "text_embedding",
                                        "time_embedding",
                                        "time_projection",
                                        "img_emb",
                                        "modulation",
                                        "head",
                                        "time_text_embed",
                                        "context_embedder",
                                        "x_embedder",
                                        "image_projection",
                                        "proj_out"};

struct ConvertOptions {
  std::string in, out;
  std::string precision;              // int8 | fp8 | bf16
  std::string fp8_scale = "channel";  // tensor | channel
  std::vector<std::string> keep;
  bool no_default_keep = false;
  std::string keep_dtype = "same";  // same | bf16
  bool quiet = false;
};

// A pattern with glob characters matches the whole name (fnmatch); any other
// pattern matches as a substring.
bool pattern_matches(const std::string& pattern, const std::string& name) {
  if (pattern.find_first_of("*?[") != std::string::npos)
    return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
  return name.find(pattern) != std::string::npos;
}

struct Source {
  WeightFile* file;
  size_t index;  // in file->tensors()
  const TensorInfo& info() const { return file->tensors()[index]; }
};

// Opens IN: a sharded index or a single safetensors file.
struct Input {
  std::unique_ptr<SafetensorsFile> single;
  ShardedCheckpoint sharded;
  std::map<std::string, Source> tensors;  // by name, sorted
  std::map<std::string, std::string> metadata;
};

Expected<Input> open_input(const std::string& path) {
  Input in;
  std::vector<WeightFile*> files;
  if (is_shard_index_path(path)) {
    FLICK_ASSIGN_OR_RETURN(in.sharded, open_sharded(path));
    for (auto& f : in.sharded.shards) files.push_back(f.get());
  } else {
    FLICK_ASSIGN_OR_RETURN(in.single, SafetensorsFile::open(path));
    files.push_back(in.single.get());
  }
  for (WeightFile* f : files) {
    for (size_t i = 0; i < f->tensors().size(); ++i)
      in.tensors.emplace(f->tensors()[i].name, Source{f, i});
    for (const auto& [k, v] : f->metadata()) in.metadata.emplace(k, v);
  }
  return in;
}

enum class Action { kQuantize, kKeep, kKeepBf16 };

struct Plan {
  Action action = Action::kKeep;
  std::string why;  // for kept tensors: the reason
};

bool is_convertible_float(const TensorInfo& t) {
  return t.type->dtype && (*t.type->dtype == DType::F32 || *t.type->dtype == DType::BF16 ||
                           *t.type->dtype == DType::F16);
}

Plan plan_tensor(const ConvertOptions& o, const std::vector<std::string>& keep, const Input& in,
                 const TensorInfo& t) {
  const auto kept = [&](std::string why) {
    const bool cast = o.keep_dtype == "bf16" && is_convertible_float(t) &&
                      *t.type->dtype != DType::BF16 && t.shape.size() <= kMaxDims;
    return Plan{cast ? Action::kKeepBf16 : Action::kKeep, std::move(why)};
  };
  if (!t.name.ends_with(".weight")) return kept("not a .weight");
  if (in.tensors.count(t.name + "_scale")) return kept("already quantized");
  if (t.shape.size() < 2) return kept("rank " + std::to_string(t.shape.size()));
  if (t.shape.size() > kMaxDims) return kept("rank > " + std::to_string(kMaxDims));
  if (!is_convertible_float(t)) return kept(std::string(t.type->name));
  if (t.numel == 0) return kept("empty");
  for (const std::string& p : keep)
    if (pattern_matches(p, t.name)) return kept("keep '" + p + "'");
  return {Action::kQuantize, ""};
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

// The worst tensor by one metric, for the summary.
struct Worst {
  double value;
  std::string name;
  void update(double v, const std::string& n, bool lower_is_worse) {
    if (name.empty() || (lower_is_worse ? v < value : v > value)) value = v, name = n;
  }
};

Status run_convert(const ConvertOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  FLICK_ASSIGN_OR_RETURN(Input in, open_input(o.in));

  std::vector<std::string> keep;
  if (!o.no_default_keep) keep.assign(std::begin(kDefaultKeep), std::end(kDefaultKeep));
  keep.insert(keep.end(), o.keep.begin(), o.keep.end());

  const bool to_bf16 = o.precision == "bf16";
  const QuantScheme scheme = o.precision == "int8"     ? QuantScheme::kInt8PerChannel
                             : o.fp8_scale == "tensor" ? QuantScheme::kFp8PerTensor
                                                       : QuantScheme::kFp8PerChannel;
  const std::string label = to_bf16 ? "bf16" : std::string(quant_scheme_name(scheme));

  std::vector<SafetensorsTensor> out;
  std::deque<OwnedTensor> owned;  // converted data; deque keeps addresses stable
  uint64_t bytes_in = 0, bytes_out = 0;
  int n_converted = 0, n_kept = 0;
  double cosine_sum = 0;
  Worst worst_cos{}, worst_rel{};

  for (const auto& [name, src] : in.tensors) {
    const TensorInfo& t = src.info();
    FLICK_ASSIGN_OR_RETURN(const uint8_t* data, src.file->data(src.index));
    bytes_in += t.nbytes;
    const Plan plan = plan_tensor(o, keep, in, t);
    const std::string shape = t.shape_str();

    if (plan.action == Action::kKeep) {
      SafetensorsTensor st;
      st.name = name;
      st.type = t.type;
      st.shape = t.shape;
      st.data = data;
      out.push_back(std::move(st));
      bytes_out += t.nbytes;
      ++n_kept;
      if (!o.quiet)
        std::printf("keep  %-6s %s %s (%s)\n", std::string(t.type->name).c_str(), name.c_str(),
                    shape.c_str(), plan.why.c_str());
      continue;
    }

    const Tensor w =
        Tensor::view(const_cast<uint8_t*>(data), *t.type->dtype, Shape::from_vector(t.shape));
    if (plan.action == Action::kKeepBf16 || to_bf16) {
      OwnedTensor& b = owned.emplace_back(DType::BF16, w.shape);
      convert(w.dtype, w.data, DType::BF16, b.t.data, w.numel());
      out.push_back(SafetensorsTensor::from_tensor(name, b.t));
      bytes_out += b.t.nbytes();
      if (plan.action == Action::kKeepBf16) {
        ++n_kept;
        if (!o.quiet)
          std::printf("keep  %-6s %s %s (%s, %s -> BF16)\n", "BF16", name.c_str(), shape.c_str(),
                      plan.why.c_str(), std::string(t.type->name).c_str());
        continue;
      }
      const QuantError e = quant_error(w, b.t);
      ++n_converted;
      cosine_sum += e.cosine;
      worst_cos.update(e.cosine, name, true);
      worst_rel.update(e.max_rel_error, name, false);
      if (!o.quiet)
        std::printf("bf16  %-6s %s %s cos %.6f max_rel %.3g snr %.1f dB\n",
                    std::string(t.type->name).c_str(), name.c_str(), shape.c_str(), e.cosine,
                    e.max_rel_error, e.snr_db);
      continue;
    }

    FLICK_ASSIGN_OR_RETURN(QuantizedWeight qw, quantize_weight(w, scheme, name));
    const QuantError e = quant_error(w, qw);
    OwnedTensor& q = owned.emplace_back(std::move(qw.q));
    OwnedTensor& s = owned.emplace_back(std::move(qw.scale));
    out.push_back(SafetensorsTensor::from_tensor(name, q.t));
    out.push_back(SafetensorsTensor::from_tensor(name + "_scale", s.t));
    bytes_out += q.t.nbytes() + s.t.nbytes();
    ++n_converted;
    cosine_sum += e.cosine;
    worst_cos.update(e.cosine, name, true);
    worst_rel.update(e.max_rel_error, name, false);
    if (!o.quiet)
      std::printf("%-5s %-6s %s %s cos %.6f max_rel %.3g snr %.1f dB\n", o.precision.c_str(),
                  std::string(t.type->name).c_str(), name.c_str(), shape.c_str(), e.cosine,
                  e.max_rel_error, e.snr_db);
  }

  std::map<std::string, std::string> metadata = in.metadata;
  metadata["flick.precision"] = label;
  std::string keep_list;
  for (const std::string& p : keep) keep_list += (keep_list.empty() ? "" : ",") + p;
  metadata["flick.keep"] = keep_list;
  FLICK_TRY(write_safetensors(o.out, out, metadata));

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("flick convert: %d tensors converted to %s, %d kept; %s -> %s in %.1f s\n",
              n_converted, label.c_str(), n_kept, human_bytes(bytes_in).c_str(),
              human_bytes(bytes_out).c_str(), secs);
  if (n_converted > 0)
    std::printf("  cosine: min %.6f (%s), mean %.6f; max relative error: max %.3g (%s)\n",
                worst_cos.value, worst_cos.name.c_str(), cosine_sum / n_converted, worst_rel.value,
                worst_rel.name.c_str());
  std::fflush(stdout);
  return ok_status();
}

}  // namespace

void register_convert(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Quantize a safetensors checkpoint (INT8 / FP8 weights with F32 scales, or BF16) "
      "and report the error of every converted tensor");
  cmd->add_option("IN", o->in, "input .safetensors, or a sharded *.safetensors.index.json")
      ->required();
  cmd->add_option("OUT", o->out, "output .safetensors (written atomically)")->required();
  cmd->add_option("--precision", o->precision,
                  "int8: I8 weights, F32 scale per output channel; fp8: F8_E4M3 weights; "
                  "bf16: BF16 weights")
      ->required()
      ->check(CLI::IsMember({"int8", "fp8", "bf16"}));
  cmd->add_option("--fp8-scale", o->fp8_scale, "FP8 scale granularity")
      ->check(CLI::IsMember({"tensor", "channel"}))
      ->capture_default_str();
  std::string defaults;
  for (const char* p : kDefaultKeep) defaults += std::string(defaults.empty() ? "" : ", ") + p;
  cmd->add_option("--keep", o->keep,
                  "also keep tensors matching PATTERN (a substring, or a glob on the full name "
                  "if it has * ? or [); repeatable. Kept by default: " +
                      defaults)
      ->type_name("PATTERN")
      ->allow_extra_args(false);  // one pattern per --keep, so IN OUT may follow it
  cmd->add_flag("--no-default-keep", o->no_default_keep,
                "quantize the default-kept layers too (only --keep patterns are kept)");
  cmd->add_option("--keep-dtype", o->keep_dtype, "kept F32/F16 tensors: unchanged, or as BF16")
      ->check(CLI::IsMember({"same", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o->quiet, "print the summary only");
  cmd->callback([o, &ctx] { ctx.finish(run_convert(*o)); });
}

}  // namespace flick
