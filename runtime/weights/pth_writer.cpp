#include "runtime/weights/pth_writer.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include "runtime/file_util.h"
#include "runtime/weights/stored_type.h"
#include "runtime/weights/weight_file.h"

namespace flick {
namespace {

// ---- pickle (protocol 2, as CPython's pickler writes it for torch.save) ----

class PickleWriter {
 public:
  PickleWriter() {
    out_ += '\x80';  // PROTO 2
    out_ += '\x02';
  }

  void op(char c) { out_ += c; }
  void mark() { op('('); }

  // GLOBAL, memoised by name as the pickler memoises the class object.
  void global(std::string_view module, std::string_view name) {
    std::string line(module);
    line += '\n';
    line += name;
    const std::string key = memo_key('g', line);
    if (get_memo(key)) return;
    op('c');
    out_ += line;
    out_ += '\n';
    put(key);
  }

  // BINUNICODE of a new string object (memoised, never looked up: the pickler
  // finds a string in the memo only when it is the same object).
  void str(std::string_view s) {
    op('X');
    u32(static_cast<uint32_t>(s.size()));
    out_ += s;
    put("");
  }
  // A string the pickler sees as one shared object ('storage', 'cpu').
  void shared_str(std::string_view s) {
    const std::string key = memo_key('s', s);
    if (get_memo(key)) return;
    op('X');
    u32(static_cast<uint32_t>(s.size()));
    out_ += s;
    put(key);
  }

  void integer(uint64_t v) {
    if (v <= 0xff) {
      op('K');
      out_ += static_cast<char>(v);
    } else if (v <= 0xffff) {
      op('M');
      out_ += static_cast<char>(v & 0xff);
      out_ += static_cast<char>(v >> 8);
    } else if (v <= 0x7fffffff) {
      op('J');
      u32(static_cast<uint32_t>(v));
    } else {  // LONG1: minimal two's complement, little-endian
      std::string bytes;
      uint64_t x = v;
      while (x) {
        bytes += static_cast<char>(x & 0xff);
        x >>= 8;
      }
      if (static_cast<uint8_t>(bytes.back()) & 0x80) bytes += '\0';  // keep it positive
      op('\x8a');
      out_ += static_cast<char>(bytes.size());
      out_ += bytes;
    }
  }

  // A tuple of ints: EMPTY_TUPLE (not memoised), TUPLE1-3, or MARK ... TUPLE.
  void int_tuple(const std::vector<int64_t>& v) {
    if (v.empty()) return op(')');
    if (v.size() > 3) mark();
    for (int64_t x : v) integer(static_cast<uint64_t>(x));
    end_tuple(v.size());
  }
  // Closes a tuple of n items saved since (for n > 3) a mark, and memoises it.
  void end_tuple(size_t n) {
    static constexpr char kTupleN[] = {')', '\x85', '\x86', '\x87'};
    op(n <= 3 ? kTupleN[n] : 't');
    put("");
  }

  // BINPUT / LONG_BINPUT of the next memo slot; `key` names shared objects.
  void put(const std::string& key) {
    const uint32_t idx = next_++;
    if (!key.empty()) memo_[key] = idx;
    if (idx < 256) {
      op('q');
      out_ += static_cast<char>(idx);
    } else {
      op('r');
      u32(idx);
    }
  }

  std::string finish() {
    op('.');
    return std::move(out_);
  }

 private:
  static std::string memo_key(char kind, std::string_view s) {
    std::string k(1, kind);
    k += s;
    return k;
  }
  bool get_memo(const std::string& key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return false;
    if (it->second < 256) {
      op('h');
      out_ += static_cast<char>(it->second);
    } else {
      op('j');
      u32(it->second);
    }
    return true;
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }

  std::string out_;
  uint32_t next_ = 0;
  std::map<std::string, uint32_t> memo_;
};

// torch.<X>Storage of each dtype; float8 has none and goes through
// _rebuild_tensor_v3 with an untyped storage and a dtype argument.
struct TorchType {
  const char* storage;  // nullptr: untyped
  const char* dtype;    // for v3
};
TorchType torch_type(DType t) {
  switch (t) {
    case DType::F32: return {"FloatStorage", "float32"};
    case DType::BF16: return {"BFloat16Storage", "bfloat16"};
    case DType::F16: return {"HalfStorage", "float16"};
    case DType::I8: return {"CharStorage", "int8"};
    case DType::U8: return {"ByteStorage", "uint8"};
    case DType::I32: return {"IntStorage", "int32"};
    case DType::F8_E4M3: return {nullptr, "float8_e4m3fn"};
    case DType::F8_E5M2: return {nullptr, "float8_e5m2"};
  }
  return {nullptr, nullptr};
}
// The typed storages of the stored types flick does not compute in.
TorchType torch_type(const StreamedTensor& t) {
  if (!t.stored) return torch_type(t.dtype);
  const std::string_view n = t.stored->name;
  if (n == "I64") return {"LongStorage", "int64"};
  if (n == "F64") return {"DoubleStorage", "float64"};
  if (n == "BOOL") return {"BoolStorage", "bool"};
  if (n == "C64") return {"ComplexFloatStorage", "complex64"};
  if (n == "I16") return {"ShortStorage", "int16"};
  if (auto d = t.stored->dtype) return torch_type(*d);
  FLICK_CHECK(false, "write_pth: no torch storage for stored type");
  return {nullptr, nullptr};
}

// torch's contiguous strides: a dimension of size 0 counts as 1.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = acc;
    acc *= std::max<int64_t>(shape[d], 1);
  }
  return s;
}

// One tensor as torch pickles it (torch/_tensor.py _reduce_ex_internal,
// torch/serialization.py persistent_id): the key, the rebuild call with
// (storage pid, offset 0, size, stride, False, OrderedDict()[, dtype]).
void pickle_tensor(PickleWriter& p, const StreamedTensor& t, const std::string& key) {
  const TorchType tt = torch_type(t);
  const uint64_t numel = *checked_numel(t.shape.data(), t.shape.size());
  p.str(t.name);
  p.global("torch._utils", tt.storage ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
  p.mark();
  p.mark();  // persistent id: ('storage', type, key, 'cpu', numel)
  p.shared_str("storage");
  if (tt.storage)
    p.global("torch", tt.storage);
  else
    p.global("torch.storage", "UntypedStorage");
  p.str(key);
  p.shared_str("cpu");
  p.integer(tt.storage ? numel : numel * dtype_size(t.dtype));  // untyped storages count bytes
  p.end_tuple(5);
  p.op('Q');  // BINPERSID
  p.integer(0);
  p.int_tuple(t.shape);
  p.int_tuple(contiguous_strides(t.shape));
  p.op('\x89');  // NEWFALSE: requires_grad
  p.global("collections", "OrderedDict");
  p.op(')');
  p.op('R');  // backward_hooks = OrderedDict()
  p.put("");
  if (!tt.storage) p.global("torch", tt.dtype);
  p.end_tuple(tt.storage ? 6 : 7);
  p.op('R');
  p.put("");
}

// data.pkl: OrderedDict() then the items in SETITEMS batches of 1000 (a
// batch of one is a SETITEM), as pickle's _batch_setitems writes them.
// With `wrap_in`, the state dict is the one value of a plain dict under that
// key ({"model": state_dict}, as released training checkpoints are):
// EMPTY_DICT, the key, the OrderedDict, SETITEM.
std::string pickle_state_dict(const std::vector<StreamedTensor>& tensors,
                              const std::string& wrap_in) {
  PickleWriter p;
  if (!wrap_in.empty()) {
    p.op('}');
    p.put("");
    p.str(wrap_in);
  }
  p.global("collections", "OrderedDict");
  p.op(')');
  p.op('R');
  p.put("");
  constexpr size_t kBatch = 1000;
  for (size_t start = 0; start < tensors.size(); start += kBatch) {
    const size_t n = std::min(kBatch, tensors.size() - start);
    if (n > 1) p.mark();
    for (size_t i = start; i < start + n; ++i) pickle_tensor(p, tensors[i], std::to_string(i));
    p.op(n > 1 ? 'u' : 's');
  }
  if (!wrap_in.empty()) p.op('s');
  return p.finish();
}

// ---- zip (stored entries, 64-byte aligned data, zip64 when needed) ----

constexpr uint64_t kZip32Max = 0xffffffffu;
constexpr uint64_t kAlignment = 64;                     // torch's .storage_alignment
constexpr size_t kChunk = 8u << 20;                     // bytes generated and written per step
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, 00:00

using Filler = std::function<void(uint64_t, std::span<uint8_t>)>;

// CRC-32 of n zero bytes without touching them: crc(zeros(a + b)) =
// combine(crc(zeros(a)), crc(zeros(b)), b), over the powers of two in n.
uint32_t crc32_of_zeros(uint64_t n) {
  static_assert(sizeof(z_off_t) == 8, "crc32_combine needs 64-bit lengths");
  static const uint8_t kZero = 0;
  uLong power = crc32_z(0, &kZero, 1);  // crc(zeros(2^k)), k = 0
  uLong crc = crc32_z(0, nullptr, 0);
  for (int k = 0; k < 64 && (n >> k) != 0; ++k) {
    const auto len = static_cast<z_off_t>(uint64_t{1} << k);
    if ((n >> k) & 1) crc = crc32_combine(crc, power, len);
    if ((n >> k) > 1) power = crc32_combine(power, power, len);
  }
  return static_cast<uint32_t>(crc);
}

class ZipWriter {
 public:
  explicit ZipWriter(AtomicFile& out) : out_(out) {}

  Status add(const std::string& name, std::string_view bytes) {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    return add(name, bytes.size(), [p](uint64_t off, std::span<uint8_t> dst) {
      std::memcpy(dst.data(), p + off, dst.size());
    });
  }

  // An entry of `size` bytes from `fill` (empty: zeros, left as a hole).
  Status add(const std::string& name, uint64_t size, const Filler& fill) {
    Entry e{name, offset_, size, 0};
    std::string header = local_header(e);
    FLICK_TRY(out_.pwrite(header.data(), header.size(), static_cast<int64_t>(offset_)));
    const uint64_t data_at = offset_ + header.size();
    if (fill) {
      uint32_t crc = static_cast<uint32_t>(crc32_z(0, nullptr, 0));
      if (buf_.size() == 0 && size > 0) buf_ = HostBuffer(kChunk);
      for (uint64_t pos = 0; pos < size;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size - pos));
        auto* p = static_cast<uint8_t*>(buf_.data());
        fill(pos, {p, n});
        crc = static_cast<uint32_t>(crc32_z(crc, p, n));
        FLICK_TRY(out_.pwrite(p, n, static_cast<int64_t>(data_at + pos)));
        pos += n;
      }
      e.crc = crc;
    } else {
      e.crc = crc32_of_zeros(size);
    }
    uint8_t crc_le[4];
    put_le(crc_le, e.crc, 4);
    FLICK_TRY(out_.pwrite(crc_le, 4, static_cast<int64_t>(e.offset + 14)));
    offset_ = data_at + size;
    entries_.push_back(std::move(e));
    return ok_status();
  }

  // Central directory, zip64 end records where needed, end record.
  Status finish() {
    std::string cd;
    for (const Entry& e : entries_) cd += central_header(e);
    const uint64_t cd_offset = offset_, cd_size = cd.size(), n = entries_.size();
    std::string tail;
    const bool zip64 = n >= 0xffff || cd_offset >= kZip32Max || cd_size >= kZip32Max;
    if (zip64) {
      const uint64_t eocd64_at = cd_offset + cd_size;
      append(tail, 0x06064b50u, 4);  // zip64 end of central directory record
      append(tail, 44, 8);           // size of the rest of the record
      append(tail, 45, 2);           // version made by
      append(tail, 45, 2);           // version needed
      append(tail, 0, 4);            // this disk
      append(tail, 0, 4);            // disk of the central directory
      append(tail, n, 8);
      append(tail, n, 8);
      append(tail, cd_size, 8);
      append(tail, cd_offset, 8);
      append(tail, 0x07064b50u, 4);  // zip64 end of central directory locator
      append(tail, 0, 4);
      append(tail, eocd64_at, 8);
      append(tail, 1, 4);  // total disks
    }
    append(tail, 0x06054b50u, 4);  // end of central directory
    append(tail, 0, 2);
    append(tail, 0, 2);
    append(tail, std::min<uint64_t>(n, 0xffff), 2);
    append(tail, std::min<uint64_t>(n, 0xffff), 2);
    append(tail, std::min(cd_size, kZip32Max), 4);
    append(tail, std::min(cd_offset, kZip32Max), 4);
    append(tail, 0, 2);  // comment length
    cd += tail;
    return out_.pwrite(cd.data(), cd.size(), static_cast<int64_t>(cd_offset));
  }

 private:
  struct Entry {
    std::string name;
    uint64_t offset, size;
    uint32_t crc;
  };

  static void put_le(uint8_t* p, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
  }
  static void append(std::string& s, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  static bool big_size(const Entry& e) { return e.size >= kZip32Max; }
  static bool big_offset(const Entry& e) { return e.offset >= kZip32Max; }
  static uint16_t version_needed(const Entry& e) { return big_size(e) || big_offset(e) ? 45 : 20; }

  // Local header with a CRC placeholder (patched after the data), a zip64
  // extra for sizes of 4 GiB or more, and torch's "FB" extra field of 'Z'
  // padding that puts the data at a multiple of 64.
  static std::string local_header(const Entry& e) {
    std::string h;
    append(h, 0x04034b50u, 4);
    append(h, version_needed(e), 2);
    append(h, 0x0800, 2);  // UTF-8 names
    append(h, 0, 2);       // stored
    append(h, 0, 2);       // time
    append(h, kDosDate, 2);
    append(h, 0, 4);  // CRC, patched
    append(h, big_size(e) ? kZip32Max : e.size, 4);
    append(h, big_size(e) ? kZip32Max : e.size, 4);
    append(h, e.name.size(), 2);
    const size_t extra_at = h.size();
    append(h, 0, 2);  // extra length, below
    h += e.name;
    std::string extra;
    if (big_size(e)) {
      append(extra, 0x0001, 2);
      append(extra, 16, 2);
      append(extra, e.size, 8);
      append(extra, e.size, 8);
    }
    const uint64_t start = e.offset + h.size() + extra.size() + 4;
    const uint64_t pad = (kAlignment - start % kAlignment) % kAlignment;
    append(extra, 0x4246, 2);  // "FB"
    append(extra, pad, 2);
    extra.append(pad, 'Z');
    h += extra;
    put_le(reinterpret_cast<uint8_t*>(h.data()) + extra_at, extra.size(), 2);
    return h;
  }

  static std::string central_header(const Entry& e) {
    std::string extra;
    if (big_size(e) || big_offset(e)) {
      std::string v;
      if (big_size(e)) {
        append(v, e.size, 8);
        append(v, e.size, 8);
      }
      if (big_offset(e)) append(v, e.offset, 8);
      append(extra, 0x0001, 2);
      append(extra, v.size(), 2);
      extra += v;
    }
    std::string h;
    append(h, 0x02014b50u, 4);
    append(h, 45, 2);  // version made by
    append(h, version_needed(e), 2);
    append(h, 0x0800, 2);
    append(h, 0, 2);
    append(h, 0, 2);
    append(h, kDosDate, 2);
    append(h, e.crc, 4);
    append(h, big_size(e) ? kZip32Max : e.size, 4);
    append(h, big_size(e) ? kZip32Max : e.size, 4);
    append(h, e.name.size(), 2);
    append(h, extra.size(), 2);
    append(h, 0, 2);  // comment
    append(h, 0, 2);  // disk
    append(h, 0, 2);  // internal attributes
    append(h, 0, 4);  // external attributes
    append(h, big_offset(e) ? kZip32Max : e.offset, 4);
    h += e.name;
    h += extra;
    return h;
  }

  AtomicFile& out_;
  uint64_t offset_ = 0;
  std::vector<Entry> entries_;
  HostBuffer buf_;
};

std::string stem_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name;
}

}  // namespace

std::optional<uint64_t> StreamedTensor::nbytes() const {
  auto numel = checked_numel(shape.data(), shape.size());
  if (!numel) return std::nullopt;
  return checked_nbytes(stored ? *stored : stored_type_of(dtype), *numel);
}

StreamedTensor StreamedTensor::from_tensor(std::string name, const Tensor& t) {
  FLICK_CHECK(t.is_contiguous(), "StreamedTensor::from_tensor needs a contiguous tensor");
  const auto* base = static_cast<const uint8_t*>(t.data);
  return {std::move(name), t.dtype, t.shape.to_vector(),
          [base](uint64_t offset, std::span<uint8_t> out) {
            std::memcpy(out.data(), base + offset, out.size());
          }};
}

Status write_pth(const std::string& path, const std::vector<StreamedTensor>& tensors,
                 const PthWriteOptions& options) {
  std::set<std::string_view> names;
  std::vector<uint64_t> sizes;
  for (const StreamedTensor& t : tensors) {
    const std::string where = path + ": tensor '" + t.name + "'";
    if (!names.insert(t.name).second) return invalid_input(where + " appears twice");
    const auto n = t.nbytes();
    if (!n) return invalid_input(where + ": invalid shape " + shape_str(t.shape));
    sizes.push_back(*n);
  }
  const std::string root = options.archive_name.empty() ? stem_of(path) : options.archive_name;
  if (root.empty() || root.find('/') != std::string::npos)
    return invalid_input(path + ": invalid archive name '" + root + "'");

  FLICK_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::create(path));
  ZipWriter zip(out);
  const std::string dir = root + "/";
  FLICK_TRY(zip.add(dir + "data.pkl", pickle_state_dict(tensors, options.wrap_in)));
  FLICK_TRY(zip.add(dir + ".format_version", "1"));
  FLICK_TRY(zip.add(dir + ".storage_alignment", "64"));
  FLICK_TRY(zip.add(dir + "byteorder", "little"));
  for (size_t i = 0; i < tensors.size(); ++i)
    FLICK_TRY(zip.add(dir + "data/" + std::to_string(i), sizes[i], tensors[i].fill));
  FLICK_TRY(zip.add(dir + "version", "3\n"));
  FLICK_TRY(zip.finish());
  FLICK_TRY(out.commit());
  return fsync_dir(parent_dir(path));
}

}  // namespace flick
