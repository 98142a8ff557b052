#include "runtime/weights/pth.h"

#include <zip.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>

namespace flick {
namespace {

// A state dict's pickle is about 100 bytes per tensor.
constexpr size_t kMaxPickleBytes = 256u << 20;

std::string zip_message(zip_error_t* e) { return zip_error_strerror(e); }

Status zip_open_status(const std::string& name, zip_error_t* e) {
  const int code = zip_error_code_zip(e);
  if (code == ZIP_ER_NOENT) return not_found("cannot open " + name + ": no such file");
  if (code == ZIP_ER_OPEN || code == ZIP_ER_READ) {
    const int err = zip_error_code_system(e);
    return errno_status("cannot read", name, err ? err : EIO);
  }
  if (code == ZIP_ER_NOZIP)
    return invalid_input(name +
                         ": no zip central directory: truncated, or not a PyTorch zip "
                         "checkpoint");
  return invalid_input(name + ": not a valid zip archive: " + zip_message(e));
}

bool is_contiguous(const PickledTensor& t) {
  int64_t expected = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

// Copies a strided view element by element into row-major order.
void gather(const uint8_t* src, const PickledTensor& t, size_t elem, uint64_t numel, uint8_t* dst) {
  const size_t nd = t.shape.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = t.offset;
  for (uint64_t n = 0; n < numel; ++n) {
    std::memcpy(dst + n * elem, src + static_cast<size_t>(off) * elem, elem);
    for (size_t d = nd; d-- > 0;) {  // odometer step, last dim fastest
      if (++idx[d] < t.shape[d]) {
        off += t.strides[d];
        break;
      }
      off -= (t.shape[d] - 1) * t.strides[d];
      idx[d] = 0;
    }
  }
}

}  // namespace

PthFile::~PthFile() {
  if (zip_) zip_discard(zip_);
}

Expected<std::unique_ptr<PthFile>> PthFile::open(const std::string& path) {
  std::unique_ptr<PthFile> f(new PthFile());
  f->path_ = path;
  int code = 0;
  f->zip_ = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!f->zip_) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    if (code == ZIP_ER_OPEN || code == ZIP_ER_READ) {
      // zip_open reports only the libzip code; errno still holds the cause.
      const int err = errno;
      zip_error_fini(&e);
      return errno_status("cannot open", path, err ? err : EIO);
    }
    Status s = zip_open_status(path, &e);
    zip_error_fini(&e);
    return s;
  }
  FLICK_TRY(f->init());
  return f;
}

Expected<std::unique_ptr<PthFile>> PthFile::open_memory(std::vector<uint8_t> bytes,
                                                        const std::string& name) {
  std::unique_ptr<PthFile> f(new PthFile());
  f->path_ = name;
  f->memory_ = std::move(bytes);
  zip_error_t e;
  zip_error_init(&e);
  zip_source_t* src = zip_source_buffer_create(f->memory_.data(), f->memory_.size(), 0, &e);
  if (!src) {
    Status s = internal_error(name + ": " + zip_message(&e));
    zip_error_fini(&e);
    return s;
  }
  f->zip_ = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &e);
  if (!f->zip_) {
    zip_source_free(src);
    Status s = zip_open_status(name, &e);
    zip_error_fini(&e);
    return s;
  }
  zip_error_fini(&e);
  FLICK_TRY(f->init());
  return f;
}

// Reads a whole entry of at most `limit` bytes, checking its CRC.
Expected<std::string> PthFile::read_small_entry(const std::string& entry, size_t limit) {
  zip_int64_t index = zip_name_locate(zip_, entry.c_str(), 0);
  if (index < 0) return not_found(path_ + ": archive has no " + entry);
  zip_stat_t st;
  if (zip_stat_index(zip_, static_cast<zip_uint64_t>(index), 0, &st) != 0 ||
      !(st.valid & ZIP_STAT_SIZE))
    return invalid_input(path_ + ": cannot stat " + entry + ": " + zip_strerror(zip_));
  if (st.size > limit)
    return invalid_input(path_ + ": " + entry + " is " + std::to_string(st.size) +
                         " bytes, more than the " + std::to_string(limit) + " allowed");
  std::string out(st.size, '\0');
  zip_file_t* zf = zip_fopen_index(zip_, static_cast<zip_uint64_t>(index), 0);
  if (!zf) return invalid_input(path_ + ": cannot read " + entry + ": " + zip_strerror(zip_));
  size_t got = 0;
  Status status;
  while (status.ok()) {
    // One byte of slack: reading up to EOF is what makes libzip check the CRC.
    char slack;
    char* dst = got < out.size() ? out.data() + got : &slack;
    zip_uint64_t want = got < out.size() ? out.size() - got : 1;
    zip_int64_t n = zip_fread(zf, dst, want);
    if (n < 0) {
      status = invalid_input(path_ + ": cannot read " + entry + ": " +
                             zip_error_strerror(zip_file_get_error(zf)));
    } else if (n == 0) {
      if (got != out.size())
        status = invalid_input(path_ + ": " + entry + " ends after " + std::to_string(got) +
                               " of " + std::to_string(out.size()) + " bytes");
      break;
    } else if (got + static_cast<size_t>(n) > out.size()) {
      status = invalid_input(path_ + ": " + entry + " is longer than its declared size");
    } else {
      got += static_cast<size_t>(n);
    }
  }
  zip_fclose(zf);
  FLICK_TRY(status);
  return out;
}

Status PthFile::init() {
  const zip_int64_t n = zip_get_num_entries(zip_, 0);
  if (n <= 0) return invalid_input(path_ + ": empty zip archive, not a PyTorch checkpoint");
  // torch names every entry "<archive>/..." after the first entry's directory.
  const char* first = zip_get_name(zip_, 0, 0);
  const char* slash = first ? std::strchr(first, '/') : nullptr;
  if (!slash)
    return invalid_input(path_ +
                         ": zip entries are not in an archive directory, not "
                         "a PyTorch checkpoint");
  prefix_.assign(first, static_cast<size_t>(slash - first) + 1);

  auto byteorder = read_small_entry(prefix_ + "byteorder", 64);
  if (byteorder.ok()) {
    std::string order = *byteorder;
    while (!order.empty() && std::isspace(static_cast<unsigned char>(order.back())))
      order.pop_back();
    if (order != "little")
      return invalid_input(path_ + ": byte order '" + order + "' is not supported (only little)");
  } else if (byteorder.status().code() != StatusCode::kNotFound) {
    return byteorder.status();
  }  // absent: written before torch recorded it, always little-endian

  auto pkl = read_small_entry(prefix_ + "data.pkl", kMaxPickleBytes);
  if (!pkl.ok()) {
    if (pkl.status().code() == StatusCode::kNotFound)
      return invalid_input(path_ + ": no " + prefix_ + "data.pkl, not a PyTorch checkpoint");
    return pkl.status();
  }
  auto dict = unpickle_state_dict(reinterpret_cast<const uint8_t*>(pkl->data()), pkl->size());
  if (!dict.ok()) return dict.status().with_context(path_ + ": " + prefix_ + "data.pkl");

  // Every storage a tensor uses must be in the archive with its declared size.
  std::set<std::string> checked;
  for (const PickledTensor& t : dict->tensors) {
    if (!checked.insert(t.storage_key).second) continue;
    const std::string entry = prefix_ + "data/" + t.storage_key;
    zip_int64_t index = zip_name_locate(zip_, entry.c_str(), 0);
    zip_stat_t st;
    if (index < 0)
      return invalid_input(path_ + ": tensor '" + t.name + "': storage " + entry +
                           " is missing from the archive");
    if (zip_stat_index(zip_, static_cast<zip_uint64_t>(index), 0, &st) != 0 ||
        !(st.valid & ZIP_STAT_SIZE))
      return invalid_input(path_ + ": cannot stat " + entry + ": " + zip_strerror(zip_));
    if (st.size != t.storage_bytes)
      return invalid_input(path_ + ": tensor '" + t.name + "': storage " + entry + " is " +
                           std::to_string(st.size) + " bytes but the pickle declares " +
                           std::to_string(t.storage_bytes));
  }

  metadata_ = std::move(dict->scalars);
  pickled_ = std::move(dict->tensors);
  tensors_.reserve(pickled_.size());
  for (const PickledTensor& p : pickled_) {
    TensorInfo info;
    info.name = p.name;
    info.type = p.type;
    info.shape = p.shape;
    info.numel = *checked_numel(p.shape.data(), p.shape.size());  // checked by the unpickler
    info.nbytes = info.numel * static_cast<uint64_t>(p.type->bits / 8);
    info.strided = !is_contiguous(p);
    tensors_.push_back(std::move(info));
  }
  return check_unique_names();
}

Expected<const uint8_t*> PthFile::storage(const std::string& key) {
  auto it = storages_.find(key);
  if (it != storages_.end()) return static_cast<const uint8_t*>(it->second.data());
  const std::string entry = prefix_ + "data/" + key;
  zip_int64_t index = zip_name_locate(zip_, entry.c_str(), 0);
  FLICK_CHECK(index >= 0, "storage checked at open");
  zip_stat_t st;
  if (zip_stat_index(zip_, static_cast<zip_uint64_t>(index), 0, &st) != 0)
    return io_error(path_ + ": cannot stat " + entry + ": " + zip_strerror(zip_));
  HostBuffer buf(st.size);
  zip_file_t* zf = zip_fopen_index(zip_, static_cast<zip_uint64_t>(index), 0);
  if (!zf) return invalid_input(path_ + ": cannot read " + entry + ": " + zip_strerror(zip_));
  uint8_t* dst = static_cast<uint8_t*>(buf.data());
  uint64_t got = 0;
  Status status;
  while (status.ok()) {
    uint8_t slack;  // read to EOF so libzip checks the CRC
    const bool full = got >= st.size;
    zip_int64_t n = zip_fread(zf, full ? &slack : dst + got, full ? 1 : st.size - got);
    if (n < 0)
      status = invalid_input(path_ + ": cannot read " + entry + ": " +
                             zip_error_strerror(zip_file_get_error(zf)));
    else if (n == 0 && got != st.size)
      status = invalid_input(path_ + ": " + entry + " ends after " + std::to_string(got) + " of " +
                             std::to_string(st.size) + " bytes");
    else if (n == 0)
      break;
    else if (full)
      status = invalid_input(path_ + ": " + entry + " is longer than its declared size");
    else
      got += static_cast<uint64_t>(n);
  }
  zip_fclose(zf);
  FLICK_TRY(status);
  it = storages_.emplace(key, std::move(buf)).first;
  return static_cast<const uint8_t*>(it->second.data());
}

Expected<const uint8_t*> PthFile::data(size_t i) {
  FLICK_CHECK(i < tensors_.size(), "tensor index out of range");
  const PickledTensor& p = pickled_[i];
  const TensorInfo& t = tensors_[i];
  FLICK_ASSIGN_OR_RETURN(const uint8_t* base, storage(p.storage_key));
  const size_t elem = static_cast<size_t>(p.type->bits / 8);
  if (!t.strided) return base + static_cast<size_t>(p.offset) * elem;
  auto it = contiguous_copies_.find(i);
  if (it == contiguous_copies_.end()) {
    HostBuffer copy(t.nbytes);
    gather(base, p, elem, t.numel, static_cast<uint8_t*>(copy.data()));
    it = contiguous_copies_.emplace(i, std::move(copy)).first;
  }
  return static_cast<const uint8_t*>(it->second.data());
}

}  // namespace flick
