#include "runtime/weights/pickle.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <unordered_map>

namespace flick {
namespace {

// Bounds on what a hostile pickle can make us allocate. A torch state dict
// with 10k tensors needs about 100k objects and a stack of a few thousand.
constexpr size_t kMaxObjects = 8u << 20;
constexpr size_t kMaxStack = 4u << 20;
constexpr size_t kMaxMemo = 8u << 20;
constexpr int kMaxNesting = 64;          // containers inside containers, when flattening
constexpr size_t kMaxLeaves = 1u << 20;  // flattened entries (shared sub-dicts multiply)

enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kBytes,
  kTuple,
  kList,
  kDict,
  kGlobal,
  kStorage,
  kTensor
};

// What a whitelisted global is.
enum class Global : uint8_t {
  kOrderedDict,
  kRebuildTensorV2,
  kRebuildTensorV3,
  kRebuildParameter,
  kRebuildParameterWithState,
  kStorageType,  // torch.FloatStorage, torch.storage.UntypedStorage, ...
  kDType,        // torch.float32, ...
};

struct Obj {
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;            // str, bytes; global: "module.name"; storage: key
  std::vector<Obj*> items;  // tuple, list; dict: key0, value0, key1, value1, ...
  Global global = Global::kOrderedDict;
  const StoredType* type = nullptr;  // storage type (nullptr: untyped bytes), dtype, tensor
  uint64_t storage_bytes = 0;
  // Tensor.
  const Obj* storage = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> shape, strides;
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kGlobal: return "global";
    case Kind::kStorage: return "storage";
    case Kind::kTensor: return "tensor";
  }
  return "?";
}

std::string describe(const Obj* o) {
  if (o->kind == Kind::kGlobal) return o->s;
  return kind_name(o->kind);
}

struct StorageName {
  const char* torch_name;
  const char* stored;
};
// torch.<X>Storage classes (torch/storage.py _dtype_to_storage_type_map).
constexpr StorageName kStorageTypes[] = {
    {"FloatStorage", "F32"}, {"BFloat16Storage", "BF16"},    {"HalfStorage", "F16"},
    {"ByteStorage", "U8"},   {"CharStorage", "I8"},          {"IntStorage", "I32"},
    {"LongStorage", "I64"},  {"ShortStorage", "I16"},        {"DoubleStorage", "F64"},
    {"BoolStorage", "BOOL"}, {"ComplexFloatStorage", "C64"},
};
// torch.<dtype> objects (_rebuild_tensor_v3 names the dtype of a tensor over
// untyped storage: float8 types and any dtype without a typed storage class).
constexpr StorageName kDTypes[] = {
    {"float32", "F32"},
    {"float", "F32"},
    {"bfloat16", "BF16"},
    {"float16", "F16"},
    {"half", "F16"},
    {"float8_e4m3fn", "F8_E4M3"},
    {"float8_e5m2", "F8_E5M2"},
    {"int8", "I8"},
    {"uint8", "U8"},
    {"int32", "I32"},
    {"int", "I32"},
    {"int64", "I64"},
    {"long", "I64"},
    {"int16", "I16"},
    {"short", "I16"},
    {"uint16", "U16"},
    {"uint32", "U32"},
    {"uint64", "U64"},
    {"float64", "F64"},
    {"double", "F64"},
    {"bool", "BOOL"},
    {"complex64", "C64"},
    {"cfloat", "C64"},
    {"float8_e4m3fnuz", "F8_E4M3FNUZ"},
    {"float8_e5m2fnuz", "F8_E5M2FNUZ"},
    {"float8_e8m0fnu", "F8_E8M0"},
};

const StoredType* lookup(const StorageName* table, size_t n, std::string_view name) {
  for (size_t i = 0; i < n; ++i)
    if (name == table[i].torch_name) return stored_type_by_name(table[i].stored);
  return nullptr;
}

class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t size) : data_(data), size_(size) {
    none_.kind = Kind::kNone;
    true_.kind = false_.kind = Kind::kBool;
    true_.b = true;
  }

  Expected<Obj*> run();

 private:
  Status fail(const std::string& m) const {
    return invalid_input("pickle byte " + std::to_string(op_pos_) + ": " + m);
  }
  Expected<Obj*> make(Kind k) {
    if (objects_.size() >= kMaxObjects) return fail("more than 8M objects");
    objects_.emplace_back();
    objects_.back().kind = k;
    return &objects_.back();
  }
  Status push(Obj* o) {
    if (stack_.size() >= kMaxStack) return fail("stack deeper than 4M entries");
    stack_.push_back(o);
    return ok_status();
  }
  Expected<Obj*> pop() {
    if (stack_.size() <= mark_floor()) return fail("pops from an empty stack");
    Obj* o = stack_.back();
    stack_.pop_back();
    return o;
  }
  size_t mark_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // Everything above the most recent MARK, which is removed.
  Expected<std::vector<Obj*>> pop_mark() {
    if (marks_.empty()) return fail("no MARK to pop to");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Obj*> items(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Expected<const uint8_t*> take(uint64_t n) {
    if (n > size_ - pos_) return fail("truncated: needs " + std::to_string(n) + " more bytes");
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  Expected<uint64_t> read_uint(int bytes) {
    FLICK_ASSIGN_OR_RETURN(const uint8_t* p, take(static_cast<uint64_t>(bytes)));
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  Expected<std::string> read_line() {
    const void* nl = std::memchr(data_ + pos_, '\n', size_ - pos_);
    if (!nl) return fail("truncated: unterminated line");
    size_t len = static_cast<size_t>(static_cast<const uint8_t*>(nl) - (data_ + pos_));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len + 1;
    return s;
  }
  Status push_string(Kind k, uint64_t len) {
    FLICK_ASSIGN_OR_RETURN(const uint8_t* p, take(len));
    FLICK_ASSIGN_OR_RETURN(Obj * o, make(k));
    o->s.assign(reinterpret_cast<const char*>(p), len);
    return push(o);
  }
  Status push_int(int64_t v) {
    FLICK_ASSIGN_OR_RETURN(Obj * o, make(Kind::kInt));
    o->i = v;
    return push(o);
  }
  Status push_long(uint64_t len);
  Status push_global(const std::string& module, const std::string& name);
  Status memo_put(uint64_t index);
  Status memo_get(uint64_t index);
  Status persistent_load();
  Status reduce();
  Status build();
  Status set_items(Obj* dict, const std::vector<Obj*>& kv);
  Expected<Obj*> rebuild_tensor(const std::vector<Obj*>& args, bool v3);
  Expected<int64_t> as_int(const Obj* o, const std::string& what) const {
    if (o->kind != Kind::kInt) return fail(what + " must be an int, not " + describe(o));
    return o->i;
  }
  Expected<std::vector<int64_t>> as_int_tuple(const Obj* o, const std::string& what) const;

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  std::deque<Obj> objects_;  // owns every object; pointers stay valid
  Obj none_, true_, false_;
  std::vector<Obj*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Obj*> memo_;
  std::unordered_map<std::string, Obj*> storages_;  // by key: shared storages
};

Status Unpickler::push_long(uint64_t len) {
  FLICK_ASSIGN_OR_RETURN(const uint8_t* p, take(len));
  // Little-endian two's complement; anything beyond int64 is not a sane
  // size, offset or stride.
  uint64_t v = 0;
  const uint64_t n = std::min<uint64_t>(len, 8);
  for (uint64_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  const bool negative = len > 0 && (p[len - 1] & 0x80);
  if (len < 8 && negative) v |= ~uint64_t{0} << (8 * len);
  for (uint64_t i = 8; i < len; ++i)
    if (p[i] != (negative ? 0xFF : 0x00)) return fail("integer wider than 64 bits");
  if (len > 8 && ((v >> 63) != 0) != negative) return fail("integer wider than 64 bits");
  return push_int(static_cast<int64_t>(v));
}

Status Unpickler::push_global(const std::string& module, const std::string& name) {
  FLICK_ASSIGN_OR_RETURN(Obj * o, make(Kind::kGlobal));
  o->s = module + "." + name;
  if (module == "collections" && name == "OrderedDict") {
    o->global = Global::kOrderedDict;
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    o->global = Global::kRebuildTensorV2;
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v3") {
    o->global = Global::kRebuildTensorV3;
  } else if (module == "torch._utils" && name == "_rebuild_parameter") {
    o->global = Global::kRebuildParameter;
  } else if (module == "torch._utils" && name == "_rebuild_parameter_with_state") {
    o->global = Global::kRebuildParameterWithState;
  } else if ((module == "torch" || module == "torch.storage") && name == "UntypedStorage") {
    o->global = Global::kStorageType;
    o->type = nullptr;
  } else if (module == "torch" && name.size() > 7 && name.ends_with("Storage")) {
    o->global = Global::kStorageType;
    o->type = lookup(kStorageTypes, std::size(kStorageTypes), name);
    if (!o->type) return fail("unsupported storage type " + o->s);
  } else if (module == "torch" && (o->type = lookup(kDTypes, std::size(kDTypes), name))) {
    o->global = Global::kDType;
  } else {
    return fail("refusing global " + o->s +
                ": only state dicts of tensors can be loaded, not arbitrary Python objects");
  }
  return push(o);
}

Status Unpickler::memo_put(uint64_t index) {
  if (stack_.size() <= mark_floor()) return fail("memoizes from an empty stack");
  if (memo_.size() >= kMaxMemo && !memo_.count(index)) return fail("more than 8M memo entries");
  memo_[index] = stack_.back();
  return ok_status();
}

Status Unpickler::memo_get(uint64_t index) {
  auto it = memo_.find(index);
  if (it == memo_.end()) return fail("memo entry " + std::to_string(index) + " was never stored");
  return push(it->second);
}

Expected<std::vector<int64_t>> Unpickler::as_int_tuple(const Obj* o,
                                                       const std::string& what) const {
  if (o->kind != Kind::kTuple && o->kind != Kind::kList)
    return fail(what + " must be a tuple of ints, not " + describe(o));
  std::vector<int64_t> v;
  for (const Obj* e : o->items) {
    FLICK_ASSIGN_OR_RETURN(int64_t x, as_int(e, what + " entry"));
    v.push_back(x);
  }
  return v;
}

// torch.save's persistent id: ('storage', storage_type, key, location, numel).
Status Unpickler::persistent_load() {
  FLICK_ASSIGN_OR_RETURN(Obj * pid, pop());
  if (pid->kind != Kind::kTuple || pid->items.size() != 5 || pid->items[0]->kind != Kind::kStr ||
      pid->items[0]->s != "storage")
    return fail("persistent id must be ('storage', type, key, location, numel), not " +
                describe(pid));
  const Obj* type = pid->items[1];
  const Obj* key = pid->items[2];
  if (type->kind != Kind::kGlobal || type->global != Global::kStorageType)
    return fail("persistent id names " + describe(type) + " where a storage type belongs");
  if (key->kind != Kind::kStr || key->s.empty() || key->s.find('/') != std::string::npos ||
      key->s == "." || key->s == "..")
    return fail("storage key must be a plain name");
  if (pid->items[3]->kind != Kind::kStr) return fail("storage location must be a str");
  FLICK_ASSIGN_OR_RETURN(int64_t numel, as_int(pid->items[4], "storage size"));
  if (numel < 0) return fail("storage '" + key->s + "' has negative size");
  uint64_t bytes = static_cast<uint64_t>(numel);
  if (type->type &&
      __builtin_mul_overflow(bytes, static_cast<uint64_t>(type->type->bits / 8), &bytes))
    return fail("storage '" + key->s + "' size overflows");

  auto it = storages_.find(key->s);
  if (it != storages_.end()) {
    if (it->second->type != type->type || it->second->storage_bytes != bytes)
      return fail("storage '" + key->s + "' is declared twice with different types or sizes");
    return push(it->second);
  }
  FLICK_ASSIGN_OR_RETURN(Obj * s, make(Kind::kStorage));
  s->s = key->s;
  s->type = type->type;
  s->storage_bytes = bytes;
  storages_.emplace(key->s, s);
  return push(s);
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
// backward_hooks[, metadata]); v3 adds dtype after backward_hooks.
Expected<Obj*> Unpickler::rebuild_tensor(const std::vector<Obj*>& args, bool v3) {
  const size_t base = v3 ? 7 : 6;
  if (args.size() != base && args.size() != base + 1)
    return fail(std::string("_rebuild_tensor_") + (v3 ? "v3" : "v2") + " takes " +
                std::to_string(base) + " or " + std::to_string(base + 1) + " arguments, not " +
                std::to_string(args.size()));
  const Obj* storage = args[0];
  if (storage->kind != Kind::kStorage)
    return fail("tensor rebuilt from " + describe(storage) + ", not a storage");
  FLICK_ASSIGN_OR_RETURN(int64_t offset, as_int(args[1], "tensor storage offset"));
  FLICK_ASSIGN_OR_RETURN(std::vector<int64_t> shape, as_int_tuple(args[2], "tensor size"));
  FLICK_ASSIGN_OR_RETURN(std::vector<int64_t> strides, as_int_tuple(args[3], "tensor stride"));
  if (args[4]->kind != Kind::kBool) return fail("requires_grad must be a bool");
  if (args[5]->kind != Kind::kDict) return fail("backward_hooks must be a dict");

  const StoredType* type = storage->type;
  if (v3) {
    const Obj* dtype = args[6];
    if (dtype->kind != Kind::kGlobal || dtype->global != Global::kDType)
      return fail("tensor dtype must be a torch dtype, not " + describe(dtype));
    if (storage->type && storage->type != dtype->type)
      return fail("tensor of " + dtype->s + " over a typed storage of another type");
    type = dtype->type;
  }
  if (!type) type = stored_type_by_name("U8");  // untyped storage read as bytes
  if (base < args.size() && args[base]->kind != Kind::kDict && args[base]->kind != Kind::kNone)
    return fail("tensor metadata must be a dict");

  if (shape.size() != strides.size())
    return fail("tensor size " + std::to_string(shape.size()) + "-d but stride " +
                std::to_string(strides.size()) + "-d");
  if (offset < 0) return fail("negative storage offset");
  auto numel = checked_numel(shape.data(), shape.size());
  if (!numel) return fail("tensor size has a negative or overflowing dimension");
  // Elements spanned: offset + sum((size - 1) * stride) + 1.
  const uint64_t elem = static_cast<uint64_t>(type->bits / 8);
  uint64_t end = static_cast<uint64_t>(offset);
  bool overflow = false;
  if (*numel > 0) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (strides[d] < 0) return fail("negative stride");
      uint64_t span;
      overflow |= __builtin_mul_overflow(static_cast<uint64_t>(shape[d] - 1),
                                         static_cast<uint64_t>(strides[d]), &span);
      overflow |= __builtin_add_overflow(end, span, &end);
    }
    overflow |= __builtin_add_overflow(end, uint64_t{1}, &end);
  }
  uint64_t end_bytes;
  overflow |= __builtin_mul_overflow(end, elem, &end_bytes);
  if (overflow || end_bytes > storage->storage_bytes)
    return fail("tensor of size " + std::to_string(*numel) + " at offset " +
                std::to_string(offset) + " runs past the end of storage '" + storage->s + "' (" +
                std::to_string(storage->storage_bytes) + " bytes)");

  FLICK_ASSIGN_OR_RETURN(Obj * t, make(Kind::kTensor));
  t->storage = storage;
  t->type = type;
  t->offset = offset;
  t->shape = std::move(shape);
  t->strides = std::move(strides);
  return t;
}

Status Unpickler::reduce() {
  FLICK_ASSIGN_OR_RETURN(Obj * args, pop());
  FLICK_ASSIGN_OR_RETURN(Obj * fn, pop());
  if (fn->kind != Kind::kGlobal) return fail("cannot call a " + describe(fn));
  if (args->kind != Kind::kTuple) return fail("arguments of " + fn->s + " must be a tuple");
  const std::vector<Obj*>& a = args->items;
  switch (fn->global) {
    case Global::kOrderedDict: {
      if (!a.empty()) return fail("collections.OrderedDict called with arguments");
      FLICK_ASSIGN_OR_RETURN(Obj * d, make(Kind::kDict));
      return push(d);
    }
    case Global::kRebuildTensorV2:
    case Global::kRebuildTensorV3: {
      FLICK_ASSIGN_OR_RETURN(Obj * t, rebuild_tensor(a, fn->global == Global::kRebuildTensorV3));
      return push(t);
    }
    case Global::kRebuildParameter:
    case Global::kRebuildParameterWithState: {
      const size_t n = fn->global == Global::kRebuildParameter ? 3 : 4;
      if (a.size() != n || a[0]->kind != Kind::kTensor)
        return fail(fn->s + " takes a tensor and " + std::to_string(n - 1) + " more arguments");
      return push(a[0]);  // a Parameter's data is the tensor itself
    }
    case Global::kStorageType:
    case Global::kDType: break;
  }
  return fail("cannot call " + fn->s);
}

// BUILD sets an object's state. torch.save uses it for the `_metadata`
// attribute of a state dict (module versions), which carries no weights.
Status Unpickler::build() {
  FLICK_ASSIGN_OR_RETURN(Obj * state, pop());
  if (stack_.size() <= mark_floor()) return fail("BUILD on an empty stack");
  const Obj* target = stack_.back();
  if (target->kind != Kind::kDict)
    return fail("refusing to set the state of a " + describe(target));
  auto is_state = [](const Obj* o) { return o->kind == Kind::kDict || o->kind == Kind::kNone; };
  bool ok = is_state(state) || (state->kind == Kind::kTuple && state->items.size() == 2 &&
                                is_state(state->items[0]) && is_state(state->items[1]));
  if (!ok) return fail("state of a dict must be a dict, not " + describe(state));
  return ok_status();
}

Status Unpickler::set_items(Obj* dict, const std::vector<Obj*>& kv) {
  if (dict->kind != Kind::kDict) return fail("sets items on a " + describe(dict));
  if (kv.size() % 2) return fail("odd number of items for a dict");
  dict->items.insert(dict->items.end(), kv.begin(), kv.end());
  return ok_status();
}

Expected<Obj*> Unpickler::run() {
  while (pos_ < size_) {
    op_pos_ = pos_;
    const uint8_t op = data_[pos_++];
    switch (op) {
      case 0x80: {  // PROTO
        FLICK_ASSIGN_OR_RETURN(uint64_t v, read_uint(1));
        if (v < 2 || v > 5) return fail("pickle protocol " + std::to_string(v) + " (need 2-5)");
        break;
      }
      case 0x95: {  // FRAME: a length hint; opcodes simply continue
        FLICK_ASSIGN_OR_RETURN(uint64_t v, read_uint(8));
        (void)v;
        break;
      }
      case '.': {  // STOP
        if (stack_.empty()) return fail("STOP with an empty stack");
        return stack_.back();
      }
      case '(':  // MARK
        if (marks_.size() >= kMaxStack) return fail("too many MARKs");
        marks_.push_back(stack_.size());
        break;
      case '0': {  // POP
        FLICK_ASSIGN_OR_RETURN(Obj * o, pop());
        (void)o;
        break;
      }
      case '1': {  // POP_MARK
        FLICK_ASSIGN_OR_RETURN(std::vector<Obj*> v, pop_mark());
        (void)v;
        break;
      }
      case '2':  // DUP
        if (stack_.size() <= mark_floor()) return fail("DUP on an empty stack");
        FLICK_TRY(push(stack_.back()));
        break;
      case 'N': FLICK_TRY(push(&none_)); break;
      case 0x88: FLICK_TRY(push(&true_)); break;
      case 0x89: FLICK_TRY(push(&false_)); break;
      case 'J': {  // BININT
        FLICK_ASSIGN_OR_RETURN(uint64_t v, read_uint(4));
        FLICK_TRY(push_int(static_cast<int32_t>(static_cast<uint32_t>(v))));
        break;
      }
      case 'K': {  // BININT1
        FLICK_ASSIGN_OR_RETURN(uint64_t v, read_uint(1));
        FLICK_TRY(push_int(static_cast<int64_t>(v)));
        break;
      }
      case 'M': {  // BININT2
        FLICK_ASSIGN_OR_RETURN(uint64_t v, read_uint(2));
        FLICK_TRY(push_int(static_cast<int64_t>(v)));
        break;
      }
      case 0x8a: {  // LONG1
        FLICK_ASSIGN_OR_RETURN(uint64_t n, read_uint(1));
        FLICK_TRY(push_long(n));
        break;
      }
      case 0x8b: {  // LONG4
        FLICK_ASSIGN_OR_RETURN(uint64_t n, read_uint(4));
        FLICK_TRY(push_long(n));
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        FLICK_ASSIGN_OR_RETURN(const uint8_t* p, take(8));
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];
        FLICK_ASSIGN_OR_RETURN(Obj * o, make(Kind::kFloat));
        std::memcpy(&o->f, &bits, 8);
        FLICK_TRY(push(o));
        break;
      }
      case 'X':    // BINUNICODE
      case 'T': {  // BINSTRING (Python 2 str)
        FLICK_ASSIGN_OR_RETURN(uint64_t n, read_uint(4));
        FLICK_TRY(push_string(Kind::kStr, n));
        break;
      }
      case 0x8c:   // SHORT_BINUNICODE
      case 'U': {  // SHORT_BINSTRING
        FLICK_ASSIGN_OR_RETURN(uint64_t n, read_uint(1));
        FLICK_TRY(push_string(Kind::kStr, n));
        break;
      }
      case 0x8d: {  // BINUNICODE8
        FLICK_ASSIGN_OR_RETURN(uint64_t n, read_uint(8));
        FLICK_TRY(push_string(Kind::kStr, n));
        break;
      }
      case 'C': {  // SHORT_BINBYTES
        FLICK_ASSIGN_OR_RETURN(uint64_t n, read_uint(1));
        FLICK_TRY(push_string(Kind::kBytes, n));
        break;
      }
      case 'B': {  // BINBYTES
        FLICK_ASSIGN_OR_RETURN(uint64_t n, read_uint(4));
        FLICK_TRY(push_string(Kind::kBytes, n));
        break;
      }
      case 0x8e:    // BINBYTES8
      case 0x96: {  // BYTEARRAY8
        FLICK_ASSIGN_OR_RETURN(uint64_t n, read_uint(8));
        FLICK_TRY(push_string(Kind::kBytes, n));
        break;
      }
      case ')': {  // EMPTY_TUPLE
        FLICK_ASSIGN_OR_RETURN(Obj * o, make(Kind::kTuple));
        FLICK_TRY(push(o));
        break;
      }
      case 't': {  // TUPLE
        FLICK_ASSIGN_OR_RETURN(std::vector<Obj*> items, pop_mark());
        FLICK_ASSIGN_OR_RETURN(Obj * o, make(Kind::kTuple));
        o->items = std::move(items);
        FLICK_TRY(push(o));
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        const size_t n = op - 0x84u;
        if (stack_.size() < mark_floor() + n)
          return fail("TUPLE" + std::to_string(n) + " on a short stack");
        FLICK_ASSIGN_OR_RETURN(Obj * o, make(Kind::kTuple));
        o->items.assign(stack_.end() - static_cast<ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        FLICK_TRY(push(o));
        break;
      }
      case ']': {  // EMPTY_LIST
        FLICK_ASSIGN_OR_RETURN(Obj * o, make(Kind::kList));
        FLICK_TRY(push(o));
        break;
      }
      case 'l': {  // LIST
        FLICK_ASSIGN_OR_RETURN(std::vector<Obj*> items, pop_mark());
        FLICK_ASSIGN_OR_RETURN(Obj * o, make(Kind::kList));
        o->items = std::move(items);
        FLICK_TRY(push(o));
        break;
      }
      case 'a': {  // APPEND
        FLICK_ASSIGN_OR_RETURN(Obj * v, pop());
        if (stack_.size() <= mark_floor()) return fail("APPEND without a list");
        Obj* list = stack_.back();
        if (list->kind != Kind::kList) return fail("APPEND to a " + describe(list));
        list->items.push_back(v);
        break;
      }
      case 'e': {  // APPENDS
        FLICK_ASSIGN_OR_RETURN(std::vector<Obj*> items, pop_mark());
        if (stack_.size() <= mark_floor()) return fail("APPENDS without a list");
        Obj* list = stack_.back();
        if (list->kind != Kind::kList) return fail("APPENDS to a " + describe(list));
        list->items.insert(list->items.end(), items.begin(), items.end());
        break;
      }
      case '}': {  // EMPTY_DICT
        FLICK_ASSIGN_OR_RETURN(Obj * o, make(Kind::kDict));
        FLICK_TRY(push(o));
        break;
      }
      case 'd': {  // DICT
        FLICK_ASSIGN_OR_RETURN(std::vector<Obj*> items, pop_mark());
        FLICK_ASSIGN_OR_RETURN(Obj * o, make(Kind::kDict));
        FLICK_TRY(set_items(o, items));
        FLICK_TRY(push(o));
        break;
      }
      case 's': {  // SETITEM
        FLICK_ASSIGN_OR_RETURN(Obj * v, pop());
        FLICK_ASSIGN_OR_RETURN(Obj * k, pop());
        if (stack_.size() <= mark_floor()) return fail("SETITEM without a dict");
        FLICK_TRY(set_items(stack_.back(), {k, v}));
        break;
      }
      case 'u': {  // SETITEMS
        FLICK_ASSIGN_OR_RETURN(std::vector<Obj*> items, pop_mark());
        if (stack_.size() <= mark_floor()) return fail("SETITEMS without a dict");
        FLICK_TRY(set_items(stack_.back(), items));
        break;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        FLICK_ASSIGN_OR_RETURN(std::string module, read_line());
        FLICK_ASSIGN_OR_RETURN(std::string name, read_line());
        FLICK_TRY(push_global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        FLICK_ASSIGN_OR_RETURN(Obj * name, pop());
        FLICK_ASSIGN_OR_RETURN(Obj * module, pop());
        if (module->kind != Kind::kStr || name->kind != Kind::kStr)
          return fail("STACK_GLOBAL needs two strs");
        FLICK_TRY(push_global(module->s, name->s));
        break;
      }
      case 'Q': FLICK_TRY(persistent_load()); break;  // BINPERSID
      case 'R': FLICK_TRY(reduce()); break;
      case 'b': FLICK_TRY(build()); break;
      case 'q': {  // BINPUT
        FLICK_ASSIGN_OR_RETURN(uint64_t i, read_uint(1));
        FLICK_TRY(memo_put(i));
        break;
      }
      case 'r': {  // LONG_BINPUT
        FLICK_ASSIGN_OR_RETURN(uint64_t i, read_uint(4));
        FLICK_TRY(memo_put(i));
        break;
      }
      case 0x94: FLICK_TRY(memo_put(memo_.size())); break;  // MEMOIZE
      case 'h': {                                           // BINGET
        FLICK_ASSIGN_OR_RETURN(uint64_t i, read_uint(1));
        FLICK_TRY(memo_get(i));
        break;
      }
      case 'j': {  // LONG_BINGET
        FLICK_ASSIGN_OR_RETURN(uint64_t i, read_uint(4));
        FLICK_TRY(memo_get(i));
        break;
      }
      case 0x81:
      case 0x92: {  // NEWOBJ, NEWOBJ_EX: cls.__new__(cls, ...)
        const size_t depth = op == 0x81 ? 2 : 3;
        if (stack_.size() >= mark_floor() + depth)
          return fail("refusing to instantiate " + describe(stack_[stack_.size() - depth]));
        return fail("refusing to instantiate an object");
      }
      case 'i':
      case 'o': return fail("refusing to instantiate an object (INST/OBJ)");
      case 0x82:
      case 0x83:
      case 0x84: return fail("refusing an extension-registry global (EXT)");
      case 0x97:
      case 0x98: return fail("out-of-band buffers are not supported");
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        return fail(std::string("unsupported opcode ") + hex +
                    " (torch.save writes pickle protocol 2-5)");
      }
    }
  }
  op_pos_ = pos_;
  return fail("ends without STOP (truncated?)");
}

// Walks the unpickled root into dotted names, the way torch names the keys
// of nested state dicts.
class Flattener {
 public:
  explicit Flattener(PickledStateDict* out) : out_(out) {}

  Status walk(const Obj* o, const std::string& name, int depth) {
    if (++leaves_ > kMaxLeaves) return invalid_input("more than 1M entries (shared containers?)");
    const std::string where = name.empty() ? "the pickle's root" : "'" + name + "'";
    if (depth > kMaxNesting)
      return invalid_input(where + ": containers nested more than 64 deep (a cycle?)");
    switch (o->kind) {
      case Kind::kDict:
        for (size_t i = 0; i + 1 < o->items.size(); i += 2) {
          const Obj* k = o->items[i];
          std::string key;
          if (k->kind == Kind::kStr)
            key = k->s;
          else if (k->kind == Kind::kInt)
            key = std::to_string(k->i);
          else
            return invalid_input(where + ": dict key is a " + describe(k) + ", not a str");
          FLICK_TRY(walk(o->items[i + 1], join(name, key), depth + 1));
        }
        return ok_status();
      case Kind::kList:
      case Kind::kTuple:
        if (depth == 0) break;
        for (size_t i = 0; i < o->items.size(); ++i)
          FLICK_TRY(walk(o->items[i], join(name, std::to_string(i)), depth + 1));
        return ok_status();
      case Kind::kTensor: {
        if (depth == 0) break;
        PickledTensor t;
        t.name = name;
        t.type = o->type;
        t.shape = o->shape;
        t.strides = o->strides;
        t.offset = o->offset;
        t.storage_key = o->storage->s;
        t.storage_bytes = o->storage->storage_bytes;
        out_->tensors.push_back(std::move(t));
        return ok_status();
      }
      case Kind::kNone: return scalar(name, "None");
      case Kind::kBool: return scalar(name, o->b ? "True" : "False");
      case Kind::kInt: return scalar(name, std::to_string(o->i));
      case Kind::kFloat: {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", o->f);
        return scalar(name, buf);
      }
      case Kind::kStr: return scalar(name, o->s);
      case Kind::kBytes: return scalar(name, "<" + std::to_string(o->s.size()) + " bytes>");
      case Kind::kGlobal:
      case Kind::kStorage: break;
    }
    if (depth == 0)
      return invalid_input("the pickle holds a " + describe(o) + ", not a state dict");
    return invalid_input(where + ": a " + describe(o) + " is not a tensor or a plain value");
  }

 private:
  static std::string join(const std::string& a, const std::string& b) {
    return a.empty() ? b : a + "." + b;
  }
  Status scalar(const std::string& name, std::string value) {
    if (name.empty()) return invalid_input("the pickle holds a plain value, not a state dict");
    out_->scalars[name] = std::move(value);
    return ok_status();
  }

  PickledStateDict* out_;
  size_t leaves_ = 0;
};

}  // namespace

Expected<PickledStateDict> unpickle_state_dict(const uint8_t* data, size_t size) {
  Unpickler u(data, size);
  FLICK_ASSIGN_OR_RETURN(Obj * root, u.run());
  PickledStateDict out;
  Flattener f(&out);
  FLICK_TRY(f.walk(root, "", 0));
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const PickledTensor& a, const PickledTensor& b) { return a.name < b.name; });
  for (size_t i = 1; i < out.tensors.size(); ++i)
    if (out.tensors[i].name == out.tensors[i - 1].name)
      return invalid_input("two tensors flatten to the name '" + out.tensors[i].name + "'");
  for (const PickledTensor& t : out.tensors)
    if (out.scalars.count(t.name))
      return invalid_input("'" + t.name + "' is both a tensor and a value");
  return out;
}

}  // namespace flick
