#include "runtime/weights/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/file_util.h"

namespace flick {
namespace {

using Json = nlohmann::json;

// Thrown from the JSON parse callback only; caught in parse_header_json.
struct HeaderJsonError {
  std::string message;
};

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string json_type(const Json& j) {
  if (j.is_number_integer()) return "an integer";
  if (j.is_number_float()) return "a non-integer number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  if (j.is_object()) return "an object";
  if (j.is_boolean()) return "a boolean";
  return "null";
}

// Parses the header JSON, refusing duplicate keys (nlohmann would keep one
// silently) and nesting deeper than any safetensors header needs.
Expected<Json> parse_header_json(const char* begin, const char* end) {
  std::vector<std::set<std::string>> keys;  // per open object
  auto callback = [&keys](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > 8) throw HeaderJsonError{"JSON nested more than 8 levels deep"};
    switch (event) {
      case Json::parse_event_t::object_start: keys.emplace_back(); break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
          throw HeaderJsonError{"key '" + parsed.get<std::string>() + "' appears twice" +
                                (keys.size() == 1 ? "" : " in one object")};
        break;
      default: break;
    }
    return true;
  };
  try {
    return Json::parse(begin, end, callback);
  } catch (const HeaderJsonError& e) {
    return invalid_input("header is not valid: " + e.message);
  } catch (const Json::exception& e) {
    return invalid_input(std::string("header is not valid JSON: ") + e.what());
  }
}

Status parse_metadata(const Json& j, std::map<std::string, std::string>* out) {
  if (!j.is_object())
    return invalid_input("__metadata__ must be an object of strings, not " + json_type(j));
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string())
      return invalid_input("__metadata__ value '" + k + "' must be a string, not " + json_type(v));
    (*out)[k] = v.get<std::string>();
  }
  return ok_status();
}

Expected<SafetensorsHeader::Entry> parse_entry(const std::string& name, const Json& j) {
  const std::string where = "tensor '" + name + "'";
  if (!j.is_object())
    return invalid_input(where + ": entry must be an object, not " + json_type(j));
  SafetensorsHeader::Entry e;
  e.info.name = name;

  auto dtype = j.find("dtype");
  if (dtype == j.end()) return invalid_input(where + ": missing 'dtype'");
  if (!dtype->is_string())
    return invalid_input(where + ": 'dtype' must be a string, not " + json_type(*dtype));
  const std::string dtype_name = dtype->get<std::string>();
  e.info.type = stored_type_by_name(dtype_name);
  if (!e.info.type) return invalid_input(where + ": unknown dtype '" + dtype_name + "'");

  auto shape = j.find("shape");
  if (shape == j.end()) return invalid_input(where + ": missing 'shape'");
  if (!shape->is_array())
    return invalid_input(where + ": 'shape' must be an array, not " + json_type(*shape));
  for (const Json& d : *shape) {
    if (d.is_number_unsigned()) {
      uint64_t v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(INT64_MAX))
        return invalid_input(where + ": dimension " + std::to_string(v) + " is too large");
      e.info.shape.push_back(static_cast<int64_t>(v));
    } else if (d.is_number_integer()) {
      return invalid_input(where + ": negative dimension " + std::to_string(d.get<int64_t>()));
    } else {
      return invalid_input(where + ": shape entries must be integers, found " + json_type(d));
    }
  }
  auto numel = checked_numel(e.info.shape.data(), e.info.shape.size());
  if (!numel)
    return invalid_input(where + ": shape " + e.info.shape_str() + " has too many elements");
  e.info.numel = *numel;
  if (!fills_whole_bytes(*e.info.type, e.info.numel))
    return invalid_input(where + ": " + std::to_string(e.info.numel) + " elements of " +
                         dtype_name + " do not fill whole bytes");
  auto nbytes = checked_nbytes(*e.info.type, e.info.numel);
  if (!nbytes) return invalid_input(where + ": byte size of " + e.info.shape_str() + " overflows");
  e.info.nbytes = *nbytes;

  auto offsets = j.find("data_offsets");
  if (offsets == j.end()) return invalid_input(where + ": missing 'data_offsets'");
  if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    return invalid_input(where + ": 'data_offsets' must be [begin, end] with integers >= 0, not " +
                         offsets->dump());
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  if (e.end < e.begin)
    return invalid_input(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                         std::to_string(e.end) + "] end before they begin");
  if (e.end - e.begin != e.info.nbytes)
    return invalid_input(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                         std::to_string(e.end) + "] hold " + std::to_string(e.end - e.begin) +
                         " bytes but " + dtype_name + " " + e.info.shape_str() + " needs " +
                         std::to_string(e.info.nbytes));
  return e;
}

// Sorted by offset, the tensors must cover [0, data_size) exactly once.
Status check_tiling(const std::vector<SafetensorsHeader::Entry>& entries, uint64_t data_size,
                    uint64_t file_size, uint64_t data_start) {
  std::vector<const SafetensorsHeader::Entry*> order;
  order.reserve(entries.size());
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const SafetensorsHeader::Entry* prev = nullptr;
  for (const auto* e : order) {
    if (e->begin > covered)
      return invalid_input("tensor '" + e->info.name + "' starts at data offset " +
                           std::to_string(e->begin) + ", leaving a gap of " +
                           std::to_string(e->begin - covered) + " bytes after " +
                           (prev ? "tensor '" + prev->info.name + "'" : "the header"));
    if (e->begin < covered)
      return invalid_input("tensor '" + e->info.name + "' at data offsets [" +
                           std::to_string(e->begin) + ", " + std::to_string(e->end) +
                           ") overlaps tensor '" + prev->info.name + "' ending at " +
                           std::to_string(covered));
    covered = e->end;
    prev = e;
  }
  if (covered != data_size)
    return invalid_input("file is " + std::to_string(file_size) + " bytes but its header (" +
                         std::to_string(data_start) + " bytes) and tensors (" +
                         std::to_string(covered) + " bytes) make " +
                         std::to_string(data_start + covered) +
                         (covered < data_size ? ": trailing bytes" : ": file is truncated"));
  return ok_status();
}

Expected<SafetensorsHeader> parse_unprefixed(const uint8_t* data, size_t size) {
  if (size < 8)
    return invalid_input("file is " + std::to_string(size) +
                         " bytes, too short for the 8-byte header length");
  const uint64_t n = read_le64(data);
  if (n > kSafetensorsMaxHeader)
    return invalid_input("header length " + std::to_string(n) + " exceeds the limit of " +
                         std::to_string(kSafetensorsMaxHeader) + " bytes");
  if (n > size - 8)
    return invalid_input("header length " + std::to_string(n) + " runs past the end of the file (" +
                         std::to_string(size) + " bytes)");
  const char* text = reinterpret_cast<const char*>(data + 8);
  if (n == 0 || text[0] != '{') return invalid_input("header does not start with '{'");
  // nlohmann stops at a NUL as at the end of input, which would let bytes
  // after it through; JSON text never contains one.
  if (const void* nul = std::memchr(text, 0, n))
    return invalid_input("header has a NUL byte at offset " +
                         std::to_string(8 + (static_cast<const char*>(nul) - text)));
  FLICK_ASSIGN_OR_RETURN(Json root, parse_header_json(text, text + n));
  if (!root.is_object()) return invalid_input("header is not a JSON object");

  SafetensorsHeader h;
  h.data_start = 8 + n;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      FLICK_TRY(parse_metadata(value, &h.metadata));
      continue;
    }
    FLICK_ASSIGN_OR_RETURN(SafetensorsHeader::Entry e, parse_entry(key, value));
    h.entries.push_back(std::move(e));
  }
  FLICK_TRY(check_tiling(h.entries, size - h.data_start, size, h.data_start));
  // nlohmann objects iterate in key order, so entries are sorted by name.
  return h;
}

}  // namespace

Expected<SafetensorsHeader> parse_safetensors(const uint8_t* data, size_t size,
                                              const std::string& name) {
  auto h = parse_unprefixed(data, size);
  if (!h.ok()) return h.status().with_context(name);
  return h;
}

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(MappedFile map, MappedFile::open(path));
  FLICK_ASSIGN_OR_RETURN(SafetensorsHeader h, parse_safetensors(map.data(), map.size(), path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = std::move(map);
  f->metadata_ = std::move(h.metadata);
  f->tensors_.reserve(h.entries.size());
  f->file_offsets_.reserve(h.entries.size());
  for (auto& e : h.entries) {
    f->file_offsets_.push_back(h.data_start + e.begin);
    f->tensors_.push_back(std::move(e.info));
  }
  FLICK_TRY(f->check_unique_names());
  return f;
}

Expected<const uint8_t*> SafetensorsFile::data(size_t i) {
  FLICK_CHECK(i < tensors_.size(), "tensor index out of range");
  const TensorInfo& t = tensors_[i];
  const uint8_t* p = map_.data() + file_offsets_[i];
  map_.will_need(file_offsets_[i], t.nbytes);
  const size_t align = t.type->bits >= 8 ? static_cast<size_t>(t.type->bits / 8) : 1;
  if (reinterpret_cast<uintptr_t>(p) % align == 0) return p;
  // Files from old or third-party writers need not align tensors; typed
  // loads from such addresses are undefined, so copy once.
  auto it = aligned_copies_.find(i);
  if (it == aligned_copies_.end()) {
    HostBuffer copy(t.nbytes);
    if (t.nbytes) std::memcpy(copy.data(), p, t.nbytes);
    it = aligned_copies_.emplace(i, std::move(copy)).first;
  }
  return static_cast<const uint8_t*>(it->second.data());
}

SafetensorsTensor SafetensorsTensor::from_tensor(std::string name, const Tensor& t) {
  FLICK_CHECK(t.device == Device::CPU && t.is_contiguous(), "write needs a contiguous CPU tensor");
  SafetensorsTensor s;
  s.name = std::move(name);
  s.type = &stored_type_of(t.dtype);
  s.shape = t.shape.to_vector();
  s.data = t.data;
  return s;
}

Status write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  struct Planned {
    const SafetensorsTensor* t;
    uint64_t nbytes;
  };
  std::vector<Planned> plan;
  plan.reserve(tensors.size());
  std::set<std::string_view> names;
  for (const SafetensorsTensor& t : tensors) {
    const std::string where = path + ": tensor '" + t.name + "'";
    FLICK_CHECK(t.type != nullptr, where + " has no type");
    if (t.name == "__metadata__") return invalid_input(where + ": reserved name");
    if (!names.insert(t.name).second) return invalid_input(where + " appears twice");
    auto numel = checked_numel(t.shape.data(), t.shape.size());
    if (!numel) return invalid_input(where + ": invalid shape " + shape_str(t.shape));
    if (!fills_whole_bytes(*t.type, *numel))
      return invalid_input(where + ": " + std::to_string(*numel) + " elements of " +
                           std::string(t.type->name) + " do not fill whole bytes");
    auto nbytes = checked_nbytes(*t.type, *numel);
    if (!nbytes) return invalid_input(where + ": byte size overflows");
    FLICK_CHECK(*nbytes == 0 || t.data != nullptr, where + " has no data");
    plan.push_back({&t, *nbytes});
  }
  // Largest elements first keeps every offset a multiple of its element size
  // (the reference writer's order since safetensors 0.3.1).
  std::sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) {
    if (a.t->type->bits != b.t->type->bits) return a.t->type->bits > b.t->type->bits;
    return a.t->name < b.t->name;
  });

  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Planned& p : plan) {
    header[p.t->name] = {{"dtype", std::string(p.t->type->name)},
                         {"shape", p.t->shape},
                         {"data_offsets", {offset, offset + p.nbytes}}};
    offset += p.nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {  // names or metadata that are not UTF-8
    return invalid_input(path + ": cannot encode the header: " + e.what());
  }
  // Spaces are JSON whitespace; padding makes the data buffer start 8-aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(text.size() >> (8 * i));

  FLICK_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::create(path));
  FLICK_TRY(out.write(len, 8));
  FLICK_TRY(out.write(text.data(), text.size()));
  for (const Planned& p : plan) FLICK_TRY(out.write(p.t->data, p.nbytes));
  FLICK_TRY(out.commit());
  return fsync_dir(parent_dir(path));  // the rename is durable only once its directory is
}

}  // namespace flick
