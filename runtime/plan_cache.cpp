#include "runtime/plan_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "runtime/file_util.h"
#include "runtime/log.h"
#include "runtime/sha256.h"

namespace flick {
namespace {

constexpr char kMagic[8] = {'F', 'L', 'I', 'C', 'K', 'P', 'C', '1'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kAlign = 64;
constexpr char kSuffix[] = ".plan";
// Far above any real entry's tensor count / key: a header claiming more is corrupt.
constexpr uint32_t kMaxTensors = 4096;
constexpr uint32_t kMaxKey = 1 << 20;

// The fixed 64-byte header (little-endian host layout: the cache is local
// to the machine and its ISA is in every key).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t key_bytes;
  uint32_t tensor_count;
  uint32_t reserved;
  uint64_t meta_bytes;  // header + key + records + padding: the payload's offset
  uint64_t payload_bytes;
  uint64_t payload_checksum;
  uint64_t header_checksum;  // of this header (this field 0), key, records, padding
  uint64_t reserved2;
};
static_assert(sizeof(Header) == 64);

struct Record {
  uint32_t dtype;
  uint32_t ndim;
  int64_t dims[kMaxDims];
};

int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

uint64_t mix(uint64_t h) {  // the murmur3 finalizer
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

std::string sanitize(std::string_view name) {
  std::string s(name);
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) c = '_';
  if (s.empty() || s[0] == '.') s.insert(s.begin(), '_');  // no hidden files, no ".."
  return s;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

uint64_t header_checksum(Header h, const char* rest, size_t rest_bytes) {
  h.header_checksum = 0;
  return plan_checksum(rest, rest_bytes, plan_checksum(&h, sizeof(h)));
}

// mmap of a whole file, unmapped when the last holder lets go. Populated
// up front: the checksum reads every page next, and one populate call maps
// them far cheaper than a fault per 64 KB (the entries' pages are in the
// page cache on a warm start).
std::shared_ptr<void> map_file(int fd, size_t size) {
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  return std::shared_ptr<void>(p, [size](void* q) { munmap(q, size); });
}

}  // namespace

uint64_t plan_checksum(const void* data, size_t size, uint64_t seed) {
  // Four independent multiply-xor lanes over 8-byte words, so the loop runs
  // at memory speed; the tail and the length are folded in at the end.
  const auto* p = static_cast<const uint8_t*>(data);
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ULL;
  uint64_t lane[4] = {seed ^ 0x243f6a8885a308d3ULL, seed ^ 0x13198a2e03707344ULL,
                      seed ^ 0xa4093822299f31d0ULL, seed ^ 0x082efa98ec4e6c89ULL};
  size_t i = 0;
  for (; i + 32 <= size; i += 32)
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      lane[l] = (lane[l] ^ w) * kMul;
      lane[l] ^= lane[l] >> 29;
    }
  uint64_t h = mix(lane[0]) ^ mix(lane[1] + 1) ^ mix(lane[2] + 2) ^ mix(lane[3] + 3);
  for (; i < size; ++i) h = (h ^ p[i]) * kMul;
  return mix(h ^ size);
}

Expected<std::string> source_identity(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return errno_status("cannot stat", path, err);
  }
  std::vector<uint8_t> head(static_cast<size_t>(std::min<int64_t>(st.st_size, 1 << 20)));
  size_t got = 0;
  while (got < head.size()) {
    const ssize_t r = pread(fd, head.data() + got, head.size() - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = r < 0 ? errno : EIO;
      close(fd);
      return errno_status("cannot read", path, err);
    }
    got += static_cast<size_t>(r);
  }
  close(fd);
  Sha256 sha;
  sha.update(head.data(), head.size());
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return "size=" + std::to_string(st.st_size) + ";mtime_ns=" + std::to_string(mtime_ns) +
         ";head_sha256=" + sha.hex_digest();
}

PlanKey& PlanKey::add(std::string_view name, std::string_view value) {
  text_.append(name);
  text_ += '=';
  for (char c : value) text_ += c == '\n' ? ' ' : c;  // one line per field
  text_ += '\n';
  return *this;
}

PlanKey& PlanKey::add(std::string_view name, int64_t value) {
  return add(name, std::to_string(value));
}

PlanCache::PlanCache(std::string dir) : dir_(std::move(dir)) {}

std::string PlanCache::path_of(std::string_view name) const {
  return join_path(dir_, sanitize(name) + kSuffix);
}

std::optional<PlanEntry> PlanCache::load(std::string_view name, const std::string& key) const {
  const std::string path = path_of(name);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT)
      log_warning("plan cache: cannot open " + path + " (" + std::strerror(errno) +
                  "); rebuilding it");
    return std::nullopt;
  }
  auto reject = [&](const std::string& why) -> std::optional<PlanEntry> {
    log_warning("plan cache: " + path + " " + why + "; rebuilding it");
    ++rejected_;
    return std::nullopt;
  };
  struct stat st;
  const bool stat_ok = fstat(fd, &st) == 0;
  const int64_t size = stat_ok ? st.st_size : 0;
  std::shared_ptr<void> map = size >= static_cast<int64_t>(sizeof(Header))
                                  ? map_file(fd, static_cast<size_t>(size))
                                  : nullptr;
  close(fd);  // the mapping keeps the file
  if (!stat_ok || size < static_cast<int64_t>(sizeof(Header)))
    return reject("is truncated (" + std::to_string(size) + " bytes)");
  if (map == nullptr) return reject("cannot be mapped");
  const char* base = static_cast<const char*>(map.get());
  Header h;
  std::memcpy(&h, base, sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) return reject("is not a plan cache entry");
  if (h.version != kVersion)
    return reject("has format version " + std::to_string(h.version) + ", not " +
                  std::to_string(kVersion));
  if (h.key_bytes > kMaxKey || h.tensor_count > kMaxTensors) return reject("has a corrupt header");
  const int64_t records_end =
      static_cast<int64_t>(sizeof(Header)) + h.key_bytes + int64_t{h.tensor_count} * sizeof(Record);
  if (static_cast<int64_t>(h.meta_bytes) != align_up(records_end) ||
      h.payload_bytes > static_cast<uint64_t>(size) ||
      static_cast<int64_t>(h.meta_bytes + h.payload_bytes) != size)
    return reject("is truncated or has a corrupt header (" + std::to_string(size) + " bytes)");
  if (header_checksum(h, base + sizeof(Header), h.meta_bytes - sizeof(Header)) != h.header_checksum)
    return reject("has a corrupt header (checksum)");
  if (std::string_view(base + sizeof(Header), h.key_bytes) != key)
    return reject(
        "is stale (its key differs: the source, precision, shapes, ISA or oneDNN "
        "changed)");
  PlanEntry entry;
  int64_t offset = 0;
  const char* rec = base + sizeof(Header) + h.key_bytes;
  for (uint32_t i = 0; i < h.tensor_count; ++i) {
    Record r;
    std::memcpy(&r, rec + i * sizeof(Record), sizeof(r));
    if (r.dtype >= std::size(kAllDTypes) || r.ndim > kMaxDims)
      return reject("has a corrupt tensor record");
    Shape s;
    s.ndim = static_cast<int>(r.ndim);
    const DType dt = static_cast<DType>(r.dtype);
    // The byte count, without overflow whatever the dims say.
    int64_t bytes = static_cast<int64_t>(dtype_size(dt));
    for (uint32_t d = 0; d < r.ndim; ++d) {
      if (r.dims[d] < 0 || __builtin_mul_overflow(bytes, r.dims[d], &bytes))
        return reject("has a corrupt tensor record");
      s.dims[d] = r.dims[d];
    }
    if (offset + bytes > static_cast<int64_t>(h.payload_bytes))
      return reject("has tensors beyond its payload");
    entry.tensors_.push_back(
        Tensor::view(const_cast<char*>(base + h.meta_bytes + offset), dt, s));  // read-only mapping
    offset = align_up(offset + bytes);
  }
  if (plan_checksum(base + h.meta_bytes, h.payload_bytes) != h.payload_checksum)
    return reject("is corrupt (payload checksum)");
  entry.mapping_ = std::move(map);
  ++hits_;
  return entry;
}

Status PlanCache::store(std::string_view name, const std::string& key,
                        std::span<const Tensor> tensors) const {
  FLICK_CHECK(tensors.size() <= kMaxTensors && key.size() <= kMaxKey,
              "plan cache entry too large: " + std::string(name));
  FLICK_TRY(create_dir());
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.key_bytes = static_cast<uint32_t>(key.size());
  h.tensor_count = static_cast<uint32_t>(tensors.size());
  std::string meta(key);
  for (const Tensor& t : tensors) {
    FLICK_CHECK(t.is_contiguous() && t.device == Device::CPU,
                "plan cache stores contiguous CPU tensors: " + t.str());
    Record r{};
    r.dtype = static_cast<uint32_t>(t.dtype);
    r.ndim = static_cast<uint32_t>(t.ndim());
    for (int d = 0; d < t.ndim(); ++d) r.dims[d] = t.dim(d);
    meta.append(reinterpret_cast<const char*>(&r), sizeof(r));
  }
  const int64_t records_end = static_cast<int64_t>(sizeof(Header) + meta.size());
  h.meta_bytes = static_cast<uint64_t>(align_up(records_end));
  meta.resize(h.meta_bytes - sizeof(Header), '\0');
  // The last tensor's padding is not written: the payload ends with its data.
  uint64_t payload = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    payload =
        i + 1 < tensors.size()
            ? static_cast<uint64_t>(align_up(static_cast<int64_t>(payload + tensors[i].nbytes())))
            : payload + tensors[i].nbytes();
  h.payload_bytes = payload;
  // The payload as laid out (zero padding included), for the checksum and
  // one write; an entry is one layer, tens of MB at most.
  std::vector<char> buf(payload);
  uint64_t off = 0;
  for (const Tensor& t : tensors) {
    std::memcpy(buf.data() + off, t.data, t.nbytes());
    off = static_cast<uint64_t>(align_up(static_cast<int64_t>(off + t.nbytes())));
  }
  h.payload_checksum = plan_checksum(buf.data(), buf.size());
  h.header_checksum = header_checksum(h, meta.data(), meta.size());
  const std::string path = path_of(name);
  FLICK_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path));
  FLICK_TRY(f.write(&h, sizeof(h)));
  FLICK_TRY(f.write(meta.data(), meta.size()));
  FLICK_TRY(f.write(buf.data(), buf.size()));
  FLICK_TRY(f.commit());
  ++stores_;
  return ok_status();
}

Status PlanCache::create_dir() const {
  FLICK_TRY(ensure_dir(parent_dir(dir_)));
  return ensure_dir(dir_);
}

Expected<std::vector<PlanEntryInfo>> PlanCache::list() const {
  std::vector<PlanEntryInfo> out;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return out;
    return errno_status("cannot list", dir_, errno);
  }
  while (const dirent* e = readdir(d)) {
    const std::string file = e->d_name;
    if (file[0] == '.' || !ends_with(file, kSuffix)) continue;
    PlanEntryInfo info;
    info.file = file;
    const std::string path = join_path(dir_, file);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
      info.problem = std::strerror(errno);
      if (fd >= 0) close(fd);
      out.push_back(std::move(info));
      continue;
    }
    info.bytes = st.st_size;
    info.mtime_s = st.st_mtim.tv_sec;
    Header h{};
    if (pread(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h)) ||
        std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.version != kVersion ||
        h.key_bytes > kMaxKey) {
      info.problem = "unreadable header";
    } else {
      info.key.resize(h.key_bytes);
      if (pread(fd, info.key.data(), h.key_bytes, sizeof(Header)) !=
          static_cast<ssize_t>(h.key_bytes)) {
        info.key.clear();
        info.problem = "truncated";
      } else if (static_cast<int64_t>(h.meta_bytes + h.payload_bytes) != st.st_size) {
        info.problem = "truncated";
      }
    }
    close(fd);
    out.push_back(std::move(info));
  }
  closedir(d);
  std::sort(out.begin(), out.end(),
            [](const PlanEntryInfo& a, const PlanEntryInfo& b) { return a.file < b.file; });
  return out;
}

Expected<int64_t> PlanCache::clear() const {
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return int64_t{0};
    return errno_status("cannot list", dir_, errno);
  }
  std::vector<std::string> doomed;
  const time_t now = time(nullptr);
  while (const dirent* e = readdir(d)) {
    const std::string file = e->d_name;
    const std::string path = join_path(dir_, file);
    if (file[0] != '.' && ends_with(file, kSuffix)) {
      doomed.push_back(path);
    } else if (file[0] == '.' && file.find(std::string(kSuffix) + ".tmp-") != std::string::npos) {
      // A writer's temporary: only an abandoned one (a crashed writer's),
      // a live writer would fail its rename.
      struct stat st;
      if (stat(path.c_str(), &st) == 0 && now - st.st_mtim.tv_sec > 3600) doomed.push_back(path);
    }
  }
  closedir(d);
  int64_t removed = 0;
  for (const std::string& p : doomed) {
    if (unlink(p.c_str()) == 0)
      ++removed;
    else if (errno != ENOENT)
      return errno_status("cannot remove", p, errno);
  }
  return removed;
}

namespace {
thread_local PlanCacheScope* g_scope = nullptr;
}  // namespace

PlanCacheScope::PlanCacheScope(const PlanCache* cache, std::string platform)
    : cache_(cache), platform_(std::move(platform)), outer_(g_scope) {
  g_scope = this;
}

PlanCacheScope::~PlanCacheScope() { g_scope = outer_; }

void PlanCacheScope::set_source(std::string component, std::string identity) {
  component_ = std::move(component);
  identity_ = std::move(identity);
}

Status PlanCacheScope::set_checkpoint_source(std::string_view prefix, const std::string& path,
                                             const std::vector<std::string>& files) {
  if (cache_ == nullptr) return ok_status();
  std::string identity;
  for (const std::string& f : files) {
    FLICK_ASSIGN_OR_RETURN(std::string id, source_identity(f));
    if (!identity.empty()) identity += ';';
    identity += id;
  }
  std::error_code ec;
  const std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
  set_source(std::string(prefix) + "-" + sha256_hex(ec ? path : canonical).substr(0, 8),
             std::move(identity));
  return ok_status();
}

PlanCacheScope* PlanCacheScope::current() { return g_scope; }

Expected<PlanCached> PlanCached::get(
    std::string_view layer, std::string_view kind,
    const std::function<Expected<std::vector<OwnedTensor>>()>& build,
    const std::function<Status(const PlanEntry&)>& accept) {
  PlanCached out;
  const PlanCacheScope* scope = PlanCacheScope::current();
  const bool cached = scope != nullptr && scope->cache_ != nullptr;
  std::string name, key;
  if (cached) {
    name = scope->component_ + "." + std::string(layer);
    key = PlanKey()
              .add("format", kPlanCodeVersion)
              .add("kind", kind)
              .add("entry", name)
              .add("source", scope->identity_)
              .add("platform", scope->platform_)
              .text();
    out.entry = scope->cache_->load(name, key);
    if (out.entry && accept) {
      if (Status s = accept(*out.entry); !s.ok()) {
        log_warning("plan cache: " + scope->cache_->path_of(name) + " " + s.message() +
                    "; rebuilding it");
        ++scope->cache_->rejected_;
        --scope->cache_->hits_;
        out.entry.reset();
      }
    }
    if (out.entry) {
      out.tensors = out.entry->tensors();
      out.hit = true;
      return out;
    }
  }
  FLICK_ASSIGN_OR_RETURN(out.built, build());
  for (const OwnedTensor& t : out.built) out.tensors.push_back(t.t);
  if (cached)
    if (Status s = scope->cache_->store(name, key, out.tensors); !s.ok())
      log_warning("plan cache: not stored: " + s.message());
  return out;
}

std::string PlanCache::summary() const {
  return dir_ + ": " + std::to_string(hits_) + " entries loaded, " + std::to_string(stores_) +
         " stored, " + std::to_string(rejected_) + " rejected";
}

std::optional<PlanCache> open_plan_cache(const std::string& dir, std::string_view who) {
  if (dir.empty()) return std::nullopt;
  PlanCache cache(dir);
  if (Status s = cache.create_dir(); !s.ok()) {
    log_warning(std::string(who) + ": loading without the plan cache: " + s.message());
    return std::nullopt;
  }
  return cache;
}

}  // namespace flick
