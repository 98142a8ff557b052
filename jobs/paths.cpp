#include "jobs/paths.h"

#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace flick {
namespace {

constexpr size_t kMaxName = 255;
constexpr const char* kPartialSuffix = ".partial";

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    const size_t j = path.find('/', i);
    const size_t end = j == std::string::npos ? path.size() : j;
    if (end > i) parts.push_back(path.substr(i, end - i));
    i = end + 1;
  }
  return parts;
}

std::string join_parts(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += "/" + parts[i];
  return out.empty() ? "/" : out;
}

// realpath(3) into a std::string; errno is kept on failure.
bool real_path(const std::string& path, std::string* out) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return false;
  *out = buf;
  return true;
}

const Root* lexical_root(const std::string& path, const std::vector<Root>& roots) {
  for (const Root& r : roots) {
    if (is_within(path, r.configured) || is_within(path, r.canonical)) return &r;
  }
  return nullptr;
}

bool within_any(const std::string& canonical, const std::vector<Root>& roots) {
  for (const Root& r : roots) {
    if (is_within(canonical, r.canonical)) return true;
  }
  return false;
}

}  // namespace

Expected<std::string> normalize_absolute(const std::string& path, const std::string& what) {
  if (path.empty()) return invalid_input(what + ": empty path");
  if (path.find('\0') != std::string::npos) return invalid_input(what + ": NUL in path");
  if (path[0] != '/') return invalid_input(what + ": '" + path + "' is not an absolute path");
  if (path.size() >= PATH_MAX) return invalid_input(what + ": path longer than PATH_MAX");
  std::vector<std::string> kept;
  for (const std::string& part : split(path)) {
    if (part == ".") continue;
    if (part == "..") {
      return invalid_input(what + ": '" + path + "' contains '..' (not allowed in job paths)");
    }
    if (part.size() > kMaxName) return invalid_input(what + ": a path component is too long");
    kept.push_back(part);
  }
  return join_parts(kept, kept.size());
}

bool is_within(const std::string& path, const std::string& root) {
  if (root == "/") return !path.empty() && path[0] == '/';
  if (path.size() < root.size() || path.compare(0, root.size(), root) != 0) return false;
  return path.size() == root.size() || path[root.size()] == '/';
}

Expected<Root> make_root(const std::string& dir, const std::string& what) {
  FLICK_ASSIGN_OR_RETURN(std::string normal, normalize_absolute(dir, what));
  Root r;
  r.configured = normal;
  if (!real_path(normal, &r.canonical)) return errno_status(what + ": resolving", normal, errno);
  struct stat st;
  if (::stat(r.canonical.c_str(), &st) != 0) return errno_status(what + ": stat", normal, errno);
  if (!S_ISDIR(st.st_mode)) return invalid_input(what + ": " + normal + " is not a directory");
  return r;
}

std::string describe_roots(const std::vector<Root>& roots) {
  if (roots.empty()) return "none configured";
  std::string out;
  for (const Root& r : roots) {
    if (!out.empty()) out += ", ";
    out += r.configured;
  }
  return out;
}

Expected<std::string> resolve_input(const std::string& path, const std::vector<Root>& roots,
                                    const std::string& what) {
  FLICK_ASSIGN_OR_RETURN(std::string normal, normalize_absolute(path, what));
  const Root* lexical = lexical_root(normal, roots);
  if (lexical == nullptr) {
    return invalid_input(what + ": '" + normal + "' is outside the input roots (" +
                         describe_roots(roots) + ")");
  }
  std::string canonical;
  if (!real_path(normal, &canonical)) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      return not_found(what + ": '" + normal + "' does not exist");
    return errno_status(what + ": resolving", normal, err);
  }
  if (!within_any(canonical, roots)) {
    return invalid_input(what + ": '" + normal + "' resolves through a symlink to '" + canonical +
                         "', outside the input roots (" + describe_roots(roots) + ")");
  }
  return canonical;
}

std::string OutputDir::parent_path() const {
  std::string p = base;
  for (const std::string& c : create) p = (p == "/" ? "" : p) + "/" + c;
  return p;
}

std::string OutputDir::final_path() const {
  const std::string parent = parent_path();
  return (parent == "/" ? "" : parent) + "/" + leaf;
}

std::string OutputDir::partial_path() const { return final_path() + kPartialSuffix; }

Expected<OutputDir> resolve_output_dir(const std::string& dir, const std::vector<Root>& roots,
                                       const std::string& what) {
  FLICK_ASSIGN_OR_RETURN(std::string normal, normalize_absolute(dir, what));
  const std::vector<std::string> parts = split(normal);
  if (parts.empty()) return invalid_input(what + ": '/' cannot be an output directory");
  if (lexical_root(normal, roots) == nullptr) {
    return invalid_input(what + ": '" + normal + "' is outside the output roots (" +
                         describe_roots(roots) + ")");
  }
  OutputDir out;
  out.requested = normal;
  out.leaf = parts.back();
  if (out.leaf.size() + std::strlen(kPartialSuffix) > kMaxName) {
    return invalid_input(what + ": the directory name is too long");
  }
  // The leaf itself must not be a symlink (it is created or replaced by us).
  struct stat st;
  if (::lstat(normal.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    return invalid_input(what + ": '" + normal + "' is a symlink (output directories must not be)");
  }
  // Deepest existing ancestor of the leaf.
  size_t n = parts.size() - 1;
  std::string canonical;
  for (;; --n) {
    const std::string prefix = join_parts(parts, n);
    if (real_path(prefix, &canonical)) break;
    if (errno != ENOENT) return errno_status(what + ": resolving", prefix, errno);
    if (n == 0) return invalid_input(what + ": no part of '" + normal + "' exists");
  }
  if (::stat(canonical.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return invalid_input(what + ": '" + join_parts(parts, n) + "' is not a directory");
  }
  if (!within_any(canonical, roots)) {
    return invalid_input(what + ": '" + normal + "' resolves through a symlink to '" + canonical +
                         "', outside the output roots (" + describe_roots(roots) + ")");
  }
  out.base = canonical;
  out.create.assign(parts.begin() + static_cast<long>(n), parts.end() - 1);
  const std::string final_path = out.final_path();
  for (const Root& r : roots) {
    if (final_path == r.canonical) {
      return invalid_input(what + ": '" + normal +
                           "' is an output root itself; name a directory below it");
    }
  }
  return out;
}

}  // namespace flick
