// Path confinement: every input a job names must resolve (symlinks followed)
// to a file under one of the configured input roots, and every output
// directory under an output root. ".." is refused outright, so a path means
// what it says; a symlink that leads outside the roots is refused with the
// place it leads to.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "jobs/fs.h"
#include "runtime/status.h"

namespace flick {

struct Root {
  std::string configured;  // as written in the config (normalized)
  std::string canonical;   // realpath of it
};

// Normalizes an absolute path lexically: "//" and "/./" collapse, a trailing
// '/' goes. Refuses relative paths and ".." components. `what` names the
// path in messages ("input.frames").
Expected<std::string> normalize_absolute(const std::string& path, const std::string& what);

// True when canonical `path` is `root` or below it.
bool is_within(const std::string& path, const std::string& root);

// Makes a Root from a configured directory, which must exist.
Expected<Root> make_root(const std::string& dir, const std::string& what);

// The canonical path of an existing input `path` under one of `roots`.
// Missing files are not_found; anything outside the roots is invalid_input.
Expected<std::string> resolve_input(const std::string& path, const std::vector<Root>& roots,
                                    const std::string& what);

struct OutputDir {
  std::string requested;            // normalized path as the job wrote it
  std::string base;                 // canonical deepest existing ancestor (under a root)
  std::vector<std::string> create;  // components to create below `base`, the leaf excluded
  std::string leaf;                 // the output directory's own name
  // Canonical path of the output directory and of its ".partial" twin.
  std::string final_path() const;
  std::string partial_path() const;
  std::string parent_path() const;
};

// Checks an output directory: absolute, no "..", its deepest existing
// ancestor resolves under an output root, and (if it exists) it is not a
// symlink. It does not have to exist.
Expected<OutputDir> resolve_output_dir(const std::string& dir, const std::vector<Root>& roots,
                                       const std::string& what);

// Opens `canonical` (what resolve_input or resolve_output_dir returned: an
// absolute path without symlinks, under one of `roots`) relative to the
// descriptor of the root that holds it, allowing no symlink on the way
// (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS).
// Symlinks in a job's paths were followed, and their targets checked, when
// the job was validated; a component swapped for a symlink since then fails
// the open ("changed since it was checked") instead of leading out of the
// roots. Where the kernel lacks openat2 (before 5.6, or a seccomp filter
// refuses it) the same is done by walking the components with O_NOFOLLOW.
// `flags` are open(2) flags; O_CREAT is not supported.
Expected<fs::Fd> open_beneath(const std::string& canonical, const std::vector<Root>& roots,
                              int flags, const std::string& what);
// The O_NOFOLLOW walk alone (the fallback of open_beneath; for tests).
Expected<fs::Fd> open_beneath_by_walk(const std::string& canonical, const std::vector<Root>& roots,
                                      int flags, const std::string& what);

// A regular file for reading through open_beneath (O_NONBLOCK: a FIFO
// swapped in must not block the open).
Expected<fs::Fd> open_input(const std::string& canonical, const std::vector<Root>& roots,
                            const std::string& what);

// "a, b" listing of roots for messages.
std::string describe_roots(const std::vector<Root>& roots);

// Whether a path holds glob characters (*, ?, [).
bool has_glob_chars(const std::string& s);
// Whether `s` ends with the lower-case `suffix`, ignoring ASCII case.
bool ends_with_ci(const std::string& s, std::string_view suffix);

// At most this many files in one frame glob.
inline constexpr size_t kMaxFrameFiles = 1000000;

// A frame glob (PNG/JPEG files) as jobs name it: `pattern` (absolute, its
// fixed part lexically under an input root, so the glob never lists outside
// them) expanded into the canonical paths of its matches, sorted by name
// (bytewise), each a regular .png/.jpg/.jpeg file checked against the roots.
// Errors begin with `what` (the job key).
Expected<std::vector<std::string>> expand_frame_glob(const std::string& pattern,
                                                     const std::vector<Root>& roots,
                                                     const std::string& what);

}  // namespace flick
