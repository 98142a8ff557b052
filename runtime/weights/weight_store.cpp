#include "runtime/weights/weight_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include "runtime/weights/pth.h"
#include "runtime/weights/safetensors.h"
#include "runtime/weights/sharded.h"

namespace flick {

struct WeightStore::State {
  struct Entry {
    WeightFile* file;
    size_t index;  // into file->tensors()
    bool used = false;
  };
  std::vector<std::unique_ptr<WeightFile>> files;
  std::vector<Source> sources;
  std::map<std::string, Entry, std::less<>> entries;

  // Entries whose names start with prefix, as an iterator range.
  auto range(std::string_view prefix) {
    auto begin = entries.lower_bound(prefix);
    auto end = begin;
    while (end != entries.end() && std::string_view(end->first).starts_with(prefix)) ++end;
    return std::make_pair(begin, end);
  }
  std::string source_list() const {
    std::string s;
    for (const Source& src : sources) s += (s.empty() ? "" : ", ") + src.path;
    return s.empty() ? "(no weight files)" : s;
  }
};

// ---- DTypeSet ----

DTypeSet::DTypeSet(std::initializer_list<DType> ts) : mask_(0) {
  for (DType t : ts) mask_ |= bit(t);
}

DTypeSet DTypeSet::any() {
  uint32_t m = 0;
  for (DType t : kAllDTypes) m |= bit(t);
  return DTypeSet(m);
}

std::string DTypeSet::str() const {
  std::string s;
  for (DType t : kAllDTypes)
    if (contains(t)) s += (s.empty() ? "" : " or ") + std::string(dtype_name(t));
  return s;
}

// ---- WeightStore ----

WeightStore::WeightStore() : state_(std::make_unique<State>()) {}
WeightStore::~WeightStore() = default;
WeightStore::WeightStore(WeightStore&&) noexcept = default;
WeightStore& WeightStore::operator=(WeightStore&&) noexcept = default;

Expected<WeightStore> WeightStore::open(const std::vector<std::string>& paths) {
  WeightStore store;
  for (const std::string& p : paths) FLICK_TRY(store.add(p));
  return store;
}

namespace {

enum class FileKind { kZip, kLegacyTorch, kOther };

// A PyTorch checkpoint is a zip (local file header, or the end record of an
// empty archive). torch < 1.6 wrote a bare pickle stream (PROTO 2 first),
// which as a safetensors length would be absurdly large.
Expected<FileKind> sniff(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_input(path + ": not a regular file");
  }
  unsigned char magic[8] = {};
  ssize_t n = ::pread(fd, magic, sizeof magic, 0);
  int err = errno;
  ::close(fd);
  if (n < 0) return errno_status("cannot read", path, err);
  if (n >= 4 && magic[0] == 'P' && magic[1] == 'K' &&
      ((magic[2] == 3 && magic[3] == 4) || (magic[2] == 5 && magic[3] == 6)))
    return FileKind::kZip;
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | magic[i];
  if (n == 8 && magic[0] == 0x80 && magic[1] >= 2 && magic[1] <= 5 && len > kSafetensorsMaxHeader)
    return FileKind::kLegacyTorch;
  return FileKind::kOther;
}

}  // namespace

Status WeightStore::add(const std::string& path) {
  if (is_shard_index_path(path)) {
    FLICK_ASSIGN_OR_RETURN(ShardedCheckpoint ck, open_sharded(path));
    std::vector<std::unique_ptr<WeightFile>> files;
    for (auto& s : ck.shards) files.push_back(std::move(s));
    return add_files(std::move(files), {path, "sharded safetensors", std::move(ck.metadata), {}});
  }
  FLICK_ASSIGN_OR_RETURN(FileKind kind, sniff(path));
  if (kind == FileKind::kLegacyTorch)
    return invalid_input(path +
                         ": a torch.save file in the legacy format of torch < 1.6, "
                         "which flick does not read; re-save it with a newer torch");
  std::unique_ptr<WeightFile> file;
  if (kind == FileKind::kZip) {
    FLICK_ASSIGN_OR_RETURN(file, PthFile::open(path));
  } else {
    FLICK_ASSIGN_OR_RETURN(file, SafetensorsFile::open(path));
  }
  return add(std::move(file));
}

Status WeightStore::add(std::unique_ptr<WeightFile> file) {
  Source source{file->path(), std::string(file->format()), file->metadata(), {}};
  std::vector<std::unique_ptr<WeightFile>> files;
  files.push_back(std::move(file));
  return add_files(std::move(files), std::move(source));
}

void WeightStore::release_pages() const {
  for (const auto& f : state_->files) f->release_pages();
}

void WeightView::release_pages() const {
  for (const auto& f : state_->files) f->release_pages();
}

Status WeightStore::add_files(std::vector<std::unique_ptr<WeightFile>> files, Source source) {
  State& s = *state_;
  // All checks first, so a failed add leaves the store as it was.
  std::map<std::string_view, const WeightFile*> incoming;
  for (const auto& f : files) {
    for (const TensorInfo& t : f->tensors()) {
      auto it = s.entries.find(t.name);
      if (it != s.entries.end())
        return invalid_input(t.name + ": in both " + it->second.file->path() + " and " + f->path());
      auto [in, fresh] = incoming.emplace(t.name, f.get());
      if (!fresh)
        return invalid_input(t.name + ": in both " + in->second->path() + " and " + f->path());
    }
  }
  for (auto& f : files) {
    for (size_t i = 0; i < f->tensors().size(); ++i)
      s.entries.emplace(f->tensors()[i].name, State::Entry{f.get(), i});
    source.files.push_back(f.get());
    s.files.push_back(std::move(f));
  }
  s.sources.push_back(std::move(source));
  return ok_status();
}

const std::vector<WeightStore::Source>& WeightStore::sources() const { return state_->sources; }
size_t WeightStore::size() const { return state_->entries.size(); }
WeightView WeightStore::root() const { return WeightView(state_.get(), ""); }

WeightView WeightStore::view(std::string_view prefix) const { return root().sub(prefix); }

bool WeightStore::has(std::string_view name) const { return root().has(name); }
const TensorInfo* WeightStore::info(std::string_view name) const { return root().info(name); }
std::vector<std::string> WeightStore::names() const { return root().names(); }
Expected<Tensor> WeightStore::get(std::string_view name, DTypeSet dtypes) const {
  return root().get(name, dtypes);
}
Expected<Tensor> WeightStore::get(std::string_view name, DTypeSet dtypes,
                                  const Shape& shape) const {
  return root().get(name, dtypes, shape);
}
std::vector<std::string> WeightStore::unused() const { return root().unused(); }
Status WeightStore::check_all_used() const { return root().check_all_used(); }

// ---- WeightView ----

WeightView WeightView::sub(std::string_view part) const {
  std::string p = prefix_ + std::string(part);
  if (!p.empty() && p.back() != '.') p += '.';
  return WeightView(state_, std::move(p));
}

bool WeightView::has(std::string_view name) const { return info(name) != nullptr; }

const TensorInfo* WeightView::info(std::string_view name) const {
  auto it = state_->entries.find(full_name(name));
  if (it == state_->entries.end()) return nullptr;
  return &it->second.file->tensors()[it->second.index];
}

Expected<const TensorInfo*> WeightView::require(std::string_view name, int ndim) const {
  const TensorInfo* t = info(name);
  if (t == nullptr) return not_found(full_name(name) + ": missing from the checkpoint");
  if (static_cast<int>(t->shape.size()) != ndim)
    return invalid_input(full_name(name) + ": expected " + std::to_string(ndim) +
                         " dimensions, file has " + t->shape_str());
  return t;
}

std::vector<std::string> WeightView::names() const {
  std::vector<std::string> out;
  auto [begin, end] = state_->range(prefix_);
  for (auto it = begin; it != end; ++it) out.push_back(it->first.substr(prefix_.size()));
  return out;
}

std::vector<std::string> WeightView::children() const {
  std::vector<std::string> out;
  auto [begin, end] = state_->range(prefix_);
  for (auto it = begin; it != end; ++it) {
    std::string_view rel = std::string_view(it->first).substr(prefix_.size());
    std::string_view first = rel.substr(0, rel.find('.'));
    if (out.empty() || out.back() != first) out.emplace_back(first);
  }
  auto numeric = [](const std::string& s) {
    return !s.empty() && s.size() < 19 &&
           std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isdigit(ch); });
  };
  std::sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
    const bool na = numeric(a), nb = numeric(b);
    if (na && nb) return std::stoll(a) < std::stoll(b);
    if (na != nb) return na;  // numbers first
    return a < b;
  });
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Expected<Tensor> WeightView::get(std::string_view name, DTypeSet dtypes) const {
  return load(name, dtypes, nullptr);
}

Expected<Tensor> WeightView::get(std::string_view name, DTypeSet dtypes, const Shape& shape) const {
  return load(name, dtypes, &shape);
}

namespace {

std::string expected_shape_str(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.ndim; ++i) {
    if (i) out += ", ";
    out += s[i] == kAnyDim ? std::string("*") : std::to_string(s[i]);
  }
  return out + "]";
}

bool shape_matches(const Shape& expected, const std::vector<int64_t>& actual) {
  if (static_cast<size_t>(expected.ndim) != actual.size()) return false;
  for (int i = 0; i < expected.ndim; ++i)
    if (expected[i] != kAnyDim && expected[i] != actual[static_cast<size_t>(i)]) return false;
  return true;
}

}  // namespace

Expected<Tensor> WeightView::load(std::string_view name, DTypeSet dtypes,
                                  const Shape* shape) const {
  const std::string full = full_name(name);
  auto it = state_->entries.find(full);
  if (it == state_->entries.end())
    return not_found(full + ": no such tensor in " + state_->source_list());
  WeightStore::State::Entry& e = it->second;
  e.used = true;
  const TensorInfo& t = e.file->tensors()[e.index];
  const std::string file = " (" + e.file->path() + ")";
  if (!t.type->dtype)
    return invalid_input(full + ": dtype " + std::string(t.type->name) +
                         " is not one flick computes in" + file);
  const DType dtype = *t.type->dtype;
  if (!dtypes.contains(dtype))
    return invalid_input(full + ": expected dtype " + dtypes.str() + ", file has " +
                         std::string(t.type->name) + file);
  if (shape && !shape_matches(*shape, t.shape))
    return invalid_input(full + ": expected shape " + expected_shape_str(*shape) + ", file has " +
                         t.shape_str() + file);
  if (t.shape.size() > static_cast<size_t>(kMaxDims))
    return invalid_input(full + ": " + std::to_string(t.shape.size()) +
                         " dimensions, flick tensors have at most " + std::to_string(kMaxDims) +
                         file);
  auto data = e.file->data(e.index);
  if (!data.ok()) return data.status().with_context(full);
  // Weights are read-only (mapped PROT_READ); Tensor has no const variant.
  return Tensor::view(const_cast<uint8_t*>(*data), dtype, Shape::from_vector(t.shape));
}

void WeightView::mark_used(std::string_view name) const {
  auto it = state_->entries.find(full_name(name));
  if (it != state_->entries.end()) it->second.used = true;
}

std::vector<std::string> WeightView::unused() const {
  std::vector<std::string> out;
  auto [begin, end] = state_->range(prefix_);
  for (auto it = begin; it != end; ++it)
    if (!it->second.used) out.push_back(it->first);
  return out;
}

Status WeightView::check_all_used() const {
  std::vector<std::string> extra = unused();
  if (extra.empty()) return ok_status();
  constexpr size_t kListed = 10;
  std::string list;
  for (size_t i = 0; i < extra.size() && i < kListed; ++i) list += (i ? ", " : "") + extra[i];
  if (extra.size() > kListed) list += ", and " + std::to_string(extra.size() - kListed) + " more";
  return invalid_input(std::to_string(extra.size()) + " unexpected tensor" +
                       (extra.size() == 1 ? "" : "s") +
                       (prefix_.empty() ? "" : " under '" + prefix_ + "'") + " in " +
                       state_->source_list() + ": " + list);
}

}  // namespace flick
