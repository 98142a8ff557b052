// flick convert IN OUT --precision int8|fp8|bf16: writes a quantized copy of
// a safetensors checkpoint (one file, or a sharded *.safetensors.index.json).
//
// Every weight of a linear layer ([N, K]) or convolution ([O, I, k...],
// quantized per output channel as [O, I*k...]) named "*.weight" becomes I8 or
// F8_E4M3 with a F32 "<name>.weight_scale" beside it (architecture.md,
// runtime/quant/quantize.h); with bf16 it is rounded to BF16. Layers that stay
// in high precision across peers (norms, biases, embeddings, modulation,
// output head; see kDefaultKeep) and those matching --keep are copied
// unchanged, or to BF16 with --keep-dtype bf16. A Wan / Matrix-Game DiT
// checkpoint (model.patch_embedding + model.blocks.*) keeps exactly the layers
// of kWanKeptLayers (models/wan/wan_quant.h) instead, so the file holds what
// the DiT loader would quantize at load. One line per tensor reports what was
// done and, for converted ones, the error against the original.
//
// IN may also be a model directory (a Matrix-Game 2.0 download): OUT is then
// a new directory of the same layout, every *.safetensors converted as above,
// every other file hard-linked (copied across file systems), and a
// manifest.json naming the precision, the source and what happened to each
// file. It is built in OUT.partial and renamed into place when complete.
#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "jobs/cli.h"
#include "models/wan/wan_quant.h"
#include "runtime/file_util.h"
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

// A Wan DiT as the Matrix-Game checkpoints store it (keys under "model.").
bool is_wan_dit(const Input& in) {
  return in.tensors.count("model.patch_embedding.weight") > 0 &&
         in.tensors.count("model.blocks.0.self_attn.q.weight") > 0;
}

// What one file keeps: --keep patterns, plus kDefaultKeep, or the Wan DiT
// table for a Wan DiT (neither with --no-default-keep).
struct KeepList {
  bool wan = false;
  std::vector<std::string> patterns;

  std::string str() const {
    std::string s = wan ? "wan-dit-table" : "";
    for (const std::string& p : patterns) s += (s.empty() ? "" : ",") + p;
    return s;
  }
};

Plan plan_tensor(const ConvertOptions& o, const KeepList& keep, const Input& in,
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
  if (keep.wan)
    if (const WanKeptLayer* k = wan_kept_layer(t.name))
      return kept("keep '" + std::string(k->pattern) + "'");
  for (const std::string& p : keep.patterns)
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

// What converting one checkpoint did (for a directory's manifest).
struct FileReport {
  bool wan_dit = false;
  int converted = 0, kept = 0;
};

Expected<FileReport> convert_file(const ConvertOptions& o, const std::string& in_path,
                                  const std::string& out_path) {
  const auto t0 = std::chrono::steady_clock::now();
  FLICK_ASSIGN_OR_RETURN(Input in, open_input(in_path));

  KeepList keep;
  keep.wan = !o.no_default_keep && is_wan_dit(in);
  if (!o.no_default_keep && !keep.wan)
    keep.patterns.assign(std::begin(kDefaultKeep), std::end(kDefaultKeep));
  keep.patterns.insert(keep.patterns.end(), o.keep.begin(), o.keep.end());
  if (keep.wan)
    std::printf("%s: a Wan DiT checkpoint: keeping the layers of models/wan/wan_quant.h\n",
                in_path.c_str());

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
  metadata["flick.keep"] = keep.str();
  FLICK_TRY(write_safetensors(out_path, out, metadata));

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("flick convert: %d tensors converted to %s, %d kept; %s -> %s in %.1f s\n",
              n_converted, label.c_str(), n_kept, human_bytes(bytes_in).c_str(),
              human_bytes(bytes_out).c_str(), secs);
  if (n_converted > 0)
    std::printf("  cosine: min %.6f (%s), mean %.6f; max relative error: max %.3g (%s)\n",
                worst_cos.value, worst_cos.name.c_str(), cosine_sum / n_converted, worst_rel.value,
                worst_rel.name.c_str());
  std::fflush(stdout);
  return FileReport{keep.wan, n_converted, n_kept};
}

namespace fs = std::filesystem;

Status fs_error(const std::string& what, const fs::path& p, const std::error_code& ec) {
  return io_error(what + " " + p.string() + ": " + ec.message());
}

// Regular files under dir (symlinks followed), relative, sorted.
Expected<std::vector<fs::path>> list_model_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    files.push_back(fs::relative(it->path(), dir, ec));
    if (ec) break;
  }
  if (ec) return fs_error("cannot list", dir, ec);
  std::sort(files.begin(), files.end());
  return files;
}

Status fill_directory(const ConvertOptions& o, const fs::path& in,
                      const std::vector<fs::path>& files, const fs::path& partial);

// A new model directory: see the top of this file.
Status convert_directory(const ConvertOptions& o) {
  std::error_code ec;
  const fs::path in = fs::absolute(o.in).lexically_normal();
  const fs::path out = fs::absolute(o.out).lexically_normal();
  const fs::path partial = out.string() + ".partial";
  for (const fs::path& p : {out, partial})
    if (fs::exists(p, ec))
      return invalid_input(p.string() + ": already exists; flick convert writes a new directory");
  if (std::mismatch(in.begin(), in.end(), out.begin(), out.end()).first == in.end())
    return invalid_input(out.string() + ": the output directory is inside the input " +
                         in.string());
  FLICK_ASSIGN_OR_RETURN(std::vector<fs::path> files, list_model_files(in));
  for (const fs::path& f : files)
    if (is_shard_index_path(f.string()))
      return invalid_input((in / f).string() +
                           ": sharded checkpoints inside a model directory are not supported; "
                           "convert the index into one file first");

  fs::create_directories(partial, ec);
  if (ec) return fs_error("cannot create", partial, ec);
  // Ours alone (it did not exist): removed on failure, so a retry starts clean.
  Status st = fill_directory(o, in, files, partial);
  if (st.ok()) {
    fs::rename(partial, out, ec);
    if (ec) st = fs_error("cannot rename into place", partial, ec);
  }
  if (!st.ok()) {
    fs::remove_all(partial, ec);
    return st;
  }
  FLICK_TRY(fsync_dir(out.parent_path().string()));
  std::printf("flick convert: wrote %s (%zu files, %s)\n", out.c_str(), files.size(),
              o.precision.c_str());
  return ok_status();
}

// The converted files, links and manifest.json of a model directory, in
// `partial`.
Status fill_directory(const ConvertOptions& o, const fs::path& in,
                      const std::vector<fs::path>& files, const fs::path& partial) {
  std::error_code ec;
  nlohmann::json listing = nlohmann::json::array();
  bool wan = false;  // any Wan DiT among the checkpoints
  for (const fs::path& rel : files) {
    if (rel == "manifest.json") continue;  // an earlier conversion's: replaced below
    const fs::path src = in / rel, dst = partial / rel;
    fs::create_directories(dst.parent_path(), ec);
    if (ec) return fs_error("cannot create", dst.parent_path(), ec);
    nlohmann::json entry{{"path", rel.string()}};
    if (rel.extension() == ".safetensors") {
      FLICK_ASSIGN_OR_RETURN(FileReport r, convert_file(o, src.string(), dst.string()));
      wan = wan || r.wan_dit;
      entry["action"] = "converted";
      entry["checkpoint"] = r.wan_dit ? "wan-dit" : "other";
      entry["converted_tensors"] = r.converted;
      entry["kept_tensors"] = r.kept;
    } else {
      // Unchanged files (VAE, CLIP, configs) are shared with the source.
      fs::create_hard_link(fs::canonical(src, ec), dst, ec);
      entry["action"] = "linked";
      if (ec) {
        fs::copy_file(src, dst, ec);
        if (ec) return fs_error("cannot copy", src, ec);
        entry["action"] = "copied";
      }
      std::printf("%-9s %s\n", entry["action"].get<std::string>().c_str(), rel.c_str());
    }
    listing.push_back(std::move(entry));
  }

  // What a loader needs to know without opening the checkpoints; "keep"
  // names the keep list the DiT files used.
  nlohmann::json manifest{
      {"format", "flick-model"},
      {"version", 1},
      {"precision", o.precision},
      {"source", in.string()},
      {"keep", o.no_default_keep ? "none"
               : wan             ? "wan-dit-table (models/wan/wan_quant.h)"
                                 : "default"},
      {"extra_keep", o.keep},
      {"files", listing},
  };
  if (o.precision == "fp8") manifest["fp8_scale"] = o.fp8_scale;
  const std::string text = manifest.dump(2) + "\n";
  return write_file_atomic((partial / "manifest.json").string(), text.data(), text.size());
}

Status run_convert(const ConvertOptions& o) {
  std::error_code ec;
  if (fs::is_directory(o.in, ec)) return convert_directory(o);
  return convert_file(o, o.in, o.out).status();
}

}  // namespace

void register_convert(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Quantize a safetensors checkpoint (INT8 / FP8 weights with F32 scales, or BF16) "
      "and report the error of every converted tensor");
  cmd->add_option("IN", o->in,
                  "input .safetensors, a sharded *.safetensors.index.json, or a model "
                  "directory (e.g. Matrix-Game-2.0)")
      ->required();
  cmd->add_option("OUT", o->out,
                  "output .safetensors (written atomically), or for a directory IN a new "
                  "directory with a manifest.json")
      ->required();
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
                "quantize the default-kept layers too (the peers' list, or for a Wan DiT the "
                "table of models/wan/wan_quant.h; only --keep patterns are kept)");
  cmd->add_option("--keep-dtype", o->keep_dtype, "kept F32/F16 tensors: unchanged, or as BF16")
      ->check(CLI::IsMember({"same", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o->quiet, "print the summary only");
  cmd->callback([o, &ctx] { ctx.finish(run_convert(*o)); });
}

}  // namespace flick
