#include "jobs/paths.h"

#include <fcntl.h>
#include <glob.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
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

namespace {

// The root holding canonical `path` (the deepest, if roots nest).
const Root* holding_root(const std::string& path, const std::vector<Root>& roots) {
  const Root* best = nullptr;
  for (const Root& r : roots) {
    if (is_within(path, r.canonical) &&
        (best == nullptr || r.canonical.size() > best->canonical.size())) {
      best = &r;
    }
  }
  return best;
}

// `path` relative to `root` ("." for the root itself).
std::string relative_to(const std::string& path, const std::string& root) {
  if (path == root) return ".";
  return path.substr(root == "/" ? 1 : root.size() + 1);
}

int openat2_beneath(int root_fd, const std::string& rel, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how));
}

// Component by component, no symlink followed. A symlink met on the way
// fails with ELOOP, as RESOLVE_NO_SYMLINKS does.
int walk_beneath(int root_fd, const std::string& rel, int flags) {
  const std::vector<std::string> parts = split(rel);
  fs::Fd dir(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!dir.valid()) return -1;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i] == "..") {  // canonical paths have none; never walk up
      errno = EXDEV;
      return -1;
    }
    fs::Fd next(
        ::openat(dir.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      struct stat st;
      if (errno == ENOTDIR &&
          ::fstatat(dir.get(), parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(st.st_mode)) {
        errno = ELOOP;
      }
      return -1;
    }
    dir = std::move(next);
  }
  const std::string last = parts.empty() ? "." : parts.back();
  if (last == "..") {
    errno = EXDEV;
    return -1;
  }
  return ::openat(dir.get(), last.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
}

Expected<fs::Fd> open_beneath_impl(const std::string& canonical, const std::vector<Root>& roots,
                                   int flags, const std::string& what, bool try_openat2) {
  const Root* root = holding_root(canonical, roots);
  if (root == nullptr) {
    return invalid_input(what + ": '" + canonical + "' is outside the roots (" +
                         describe_roots(roots) + ")");
  }
  // The root itself is the administrator's (the config names it): opened
  // by its path. Everything below it is reached from its descriptor.
  fs::Fd root_fd(::open(root->canonical.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return errno_status(what + ": opening root", root->canonical, errno);
  const std::string rel = relative_to(canonical, root->canonical);
  int fd = -1;
  if (try_openat2) fd = openat2_beneath(root_fd.get(), rel, flags);
  if (!try_openat2 || (fd < 0 && (errno == ENOSYS || errno == EPERM))) {
    fd = walk_beneath(root_fd.get(), rel, flags);
  }
  if (fd >= 0) return fs::Fd(fd);
  const int err = errno;
  if (err == ELOOP || err == EXDEV) {
    return invalid_input(what + ": '" + canonical +
                         "' changed since it was checked: a component of it is now a symlink "
                         "(refused; files are opened beneath " +
                         root->canonical + " without following symlinks)");
  }
  if (err == ENOENT || err == ENOTDIR)
    return not_found(what + ": '" + canonical + "' does not exist");
  return errno_status(what + ": opening", canonical, err);
}

}  // namespace

Expected<fs::Fd> open_beneath(const std::string& canonical, const std::vector<Root>& roots,
                              int flags, const std::string& what) {
  return open_beneath_impl(canonical, roots, flags, what, /*try_openat2=*/true);
}

Expected<fs::Fd> open_beneath_by_walk(const std::string& canonical, const std::vector<Root>& roots,
                                      int flags, const std::string& what) {
  return open_beneath_impl(canonical, roots, flags, what, /*try_openat2=*/false);
}

Expected<fs::Fd> open_input(const std::string& canonical, const std::vector<Root>& roots,
                            const std::string& what) {
  FLICK_ASSIGN_OR_RETURN(fs::Fd fd,
                         open_beneath(canonical, roots, O_RDONLY | O_NONBLOCK | O_NOCTTY, what));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return errno_status(what + ": stat", canonical, errno);
  if (!S_ISREG(st.st_mode))
    return invalid_input(what + ": '" + canonical + "' is not a regular file");
  return fd;
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

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

bool ends_with_ci(const std::string& s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (size_t i = 0; i < suffix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i]) {
      return false;
    }
  }
  return true;
}

Expected<std::vector<std::string>> expand_frame_glob(const std::string& pattern,
                                                     const std::vector<Root>& roots,
                                                     const std::string& what) {
  FLICK_ASSIGN_OR_RETURN(std::string normal, normalize_absolute(pattern, what));
  // The part before the first wildcard must lie under a root, so the glob
  // never even lists directories outside them.
  const std::string fixed = normal.substr(0, normal.rfind('/', normal.find_first_of("*?[")));
  bool under_root = false;
  for (const Root& r : roots) {
    under_root |= is_within(fixed, r.configured) || is_within(fixed, r.canonical);
  }
  if (!under_root) {
    return invalid_input(what + ": '" + normal + "' is outside the input roots (" +
                         describe_roots(roots) + ")");
  }
  glob_t g{};
  const int rc = ::glob(normal.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> matches;
  if (rc == 0) matches.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH) return not_found(what + ": no file matches '" + normal + "'");
  if (rc != 0) return io_error(what + ": cannot expand '" + normal + "'");
  if (matches.size() > kMaxFrameFiles) {
    return invalid_input(what + ": '" + normal + "' matches " + std::to_string(matches.size()) +
                         " files, more than " + std::to_string(kMaxFrameFiles));
  }
  std::sort(matches.begin(), matches.end());  // by name, bytewise: not locale-dependent
  std::vector<std::string> out;
  out.reserve(matches.size());
  for (const std::string& m : matches) {
    if (!ends_with_ci(m, ".png") && !ends_with_ci(m, ".jpg") && !ends_with_ci(m, ".jpeg")) {
      return invalid_input(what + ": '" + m + "' is not a .png, .jpg or .jpeg file");
    }
    FLICK_ASSIGN_OR_RETURN(std::string canonical, resolve_input(m, roots, what));
    struct stat st;
    if (::stat(canonical.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return invalid_input(what + ": '" + m + "' is not a regular file");
    }
    out.push_back(std::move(canonical));
  }
  return out;
}

}  // namespace flick
