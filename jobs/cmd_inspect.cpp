// flick inspect FILE...: the tensors (name, dtype, shape, bytes), per-dtype
// totals and metadata of safetensors files, sharded indexes and .pth files.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jobs/cli.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

struct InspectOptions {
  std::vector<std::string> files;
  std::string prefix;
};

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string base_name(const std::string& p) {
  size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

void print_source(const WeightStore::Source& src, const std::string& prefix) {
  struct Row {
    const TensorInfo* t;
    const WeightFile* file;
  };
  std::vector<Row> rows;
  for (const WeightFile* f : src.files)
    for (const TensorInfo& t : f->tensors())
      if (std::string_view(t.name).starts_with(prefix)) rows.push_back({&t, f});
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.t->name < b.t->name; });
  const bool sharded = src.files.size() > 1 || src.format == "sharded safetensors";

  size_t wname = 4, wtype = 5, wshape = 5, wbytes = 5, wfile = 5;
  for (const Row& r : rows) {
    wname = std::max(wname, r.t->name.size());
    wtype = std::max(wtype, r.t->type->name.size());
    wshape = std::max(wshape, r.t->shape_str().size());
    wbytes = std::max(wbytes, std::to_string(r.t->nbytes).size());
    wfile = std::max(wfile, base_name(r.file->path()).size());
  }

  struct Total {
    uint64_t count = 0, numel = 0, bytes = 0;
  };
  std::map<std::string_view, Total> totals;
  Total all;
  for (const Row& r : rows) {
    for (Total* t : {&totals[r.t->type->name], &all}) {
      t->count += 1;
      t->numel += r.t->numel;
      t->bytes += r.t->nbytes;
    }
  }

  std::printf("%s: %s, %zu file%s, %llu tensor%s, %s\n", src.path.c_str(), src.format.c_str(),
              src.files.size(), src.files.size() == 1 ? "" : "s",
              static_cast<unsigned long long>(all.count), all.count == 1 ? "" : "s",
              human_bytes(all.bytes).c_str());
  if (!src.metadata.empty()) {
    std::printf("metadata:\n");
    for (const auto& [k, v] : src.metadata) std::printf("  %s: %s\n", k.c_str(), v.c_str());
  }
  std::printf("tensors:\n");
  std::printf("  %-*s  %-*s  %-*s  %*s%s%s\n", static_cast<int>(wname), "name",
              static_cast<int>(wtype), "dtype", static_cast<int>(wshape), "shape",
              static_cast<int>(wbytes), "bytes", sharded ? "  " : "", sharded ? "file" : "");
  for (const Row& r : rows) {
    std::printf("  %-*s  %-*s  %-*s  %*llu", static_cast<int>(wname), r.t->name.c_str(),
                static_cast<int>(wtype), std::string(r.t->type->name).c_str(),
                static_cast<int>(wshape), r.t->shape_str().c_str(), static_cast<int>(wbytes),
                static_cast<unsigned long long>(r.t->nbytes));
    if (sharded) std::printf("  %s", base_name(r.file->path()).c_str());
    if (r.t->strided) std::printf("  (stored strided)");
    if (!r.t->type->dtype) std::printf("  (dtype not loadable by flick)");
    std::printf("\n");
  }
  std::printf("totals:\n");
  auto total_line = [](std::string_view label, const Total& t) {
    std::printf("  %-11.*s %8llu tensor%s %14llu elements %15llu bytes (%s)\n",
                static_cast<int>(label.size()), label.data(),
                static_cast<unsigned long long>(t.count), t.count == 1 ? " " : "s",
                static_cast<unsigned long long>(t.numel), static_cast<unsigned long long>(t.bytes),
                human_bytes(t.bytes).c_str());
  };
  for (const auto& [name, t] : totals) total_line(name, t);
  total_line("all", all);
}

Status run_inspect(const InspectOptions& opt) {
  for (size_t i = 0; i < opt.files.size(); ++i) {
    WeightStore store;
    FLICK_TRY(store.add(opt.files[i]));
    if (i) std::printf("\n");
    for (const WeightStore::Source& src : store.sources()) print_source(src, opt.prefix);
  }
  std::fflush(stdout);
  return ok_status();
}

}  // namespace

void register_inspect(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect",
                                     "List the tensors, dtype totals and metadata of weight files "
                                     "(.safetensors, *.safetensors.index.json, .pth)");
  cmd->add_option("files", opt->files, "weight files")->required();
  cmd->add_option("--prefix", opt->prefix, "only tensors whose names start with this");
  cmd->callback([opt, &ctx] { ctx.finish(run_inspect(*opt)); });
}

}  // namespace flick
