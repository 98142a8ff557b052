#include "runtime/weights/sharded.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

namespace flick {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxIndexBytes = 64u << 20;

Expected<std::string> read_text_file(const std::string& path, size_t limit) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path, errno);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return errno_status("cannot read", path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limit) {
      ::close(fd);
      return invalid_input(path + ": larger than " + std::to_string(limit) + " bytes");
    }
  }
  ::close(fd);
  return out;
}

// Relative, no "..", no empty or "." components: the shard stays inside the
// index's directory (lexically; symlinks such as a Hugging Face cache's are
// followed as the deployment made them).
bool is_contained_relative_path(const std::string& p) {
  if (p.empty() || p.front() == '/') return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t slash = p.find('/', start);
    if (slash == std::string::npos) slash = p.size();
    std::string_view part(p.data() + start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return p.find('\0') == std::string::npos;
}

}  // namespace

bool is_shard_index_path(const std::string& path) { return path.ends_with(".index.json"); }

Expected<ShardedCheckpoint> open_sharded(const std::string& index_path) {
  FLICK_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path, kMaxIndexBytes));
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::exception& e) {
    return invalid_input(index_path + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) return invalid_input(index_path + ": not a JSON object");
  ShardedCheckpoint ck;
  ck.index_path = index_path;
  if (auto m = root.find("metadata"); m != root.end() && !m->is_null()) {
    if (!m->is_object()) return invalid_input(index_path + ": 'metadata' must be an object");
    for (const auto& [k, v] : m->items())
      ck.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  auto wm = root.find("weight_map");
  if (wm == root.end() || !wm->is_object())
    return invalid_input(index_path + ": missing the 'weight_map' object");

  // Shard file name -> names the map assigns to it.
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      return invalid_input(index_path + ": tensor '" + name + "': shard must be a file name");
    const std::string file = shard.get<std::string>();
    if (!is_contained_relative_path(file))
      return invalid_input(index_path + ": tensor '" + name + "': shard path '" + file +
                           "' leaves the index's directory");
    by_shard[file].push_back(name);
  }

  const size_t slash = index_path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : index_path.substr(0, slash + 1);
  for (const auto& [file, names] : by_shard) {
    auto shard = SafetensorsFile::open(dir + file);
    if (!shard.ok()) return shard.status().with_context(index_path);
    SafetensorsFile& f = **shard;
    for (const std::string& name : names)
      if (f.find(name) < 0)
        return invalid_input(index_path + ": tensor '" + name + "' is mapped to " + file +
                             ", which does not contain it");
    for (const TensorInfo& t : f.tensors()) {
      auto it = wm->find(t.name);
      if (it == wm->end())
        return invalid_input(index_path + ": tensor '" + t.name + "' of " + file +
                             " is not in the weight_map");
      if (it->get<std::string>() != file)
        return invalid_input(index_path + ": tensor '" + t.name + "' is in " + file +
                             " but the weight_map puts it in " + it->get<std::string>());
    }
    ck.shards.push_back(std::move(*shard));
  }
  return ck;
}

}  // namespace flick
