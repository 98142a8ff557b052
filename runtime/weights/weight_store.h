// WeightStore: the tensors of one or more checkpoint files (safetensors,
// sharded *.safetensors.index.json, PyTorch .pth) under their original names,
// with checked lookup. Model components load from a prefix view:
//
//   WeightStore store;
//   FLICK_TRY(store.add("/models/mg2/dit.safetensors"));
//   WeightView block = store.view("model.blocks").sub("3");      // "model.blocks.3."
//   FLICK_ASSIGN_OR_RETURN(Tensor q, block.get("self_attn.q.weight", DType::BF16, {1536, 1536}));
//   ...
//   FLICK_TRY(store.check_all_used());  // tensors no component asked for
//
// Every error names the full tensor name and its file, e.g.
//   model.blocks.3.self_attn.q.weight: expected shape [1536, 1536], file has
//   [1536, 768] (/models/mg2/dit.safetensors)
// Returned tensors are read-only views (mapped PROT_READ or owned by the
// store) and live as long as the store. Not thread-safe: load from one thread.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tensor.h"
#include "runtime/weights/weight_file.h"

namespace flick {

// The dtypes a caller accepts for a tensor.
class DTypeSet {
 public:
  DTypeSet(DType t) : mask_(bit(t)) {}  // NOLINT: implicit on purpose
  DTypeSet(std::initializer_list<DType> ts);
  static DTypeSet any();
  bool contains(DType t) const { return mask_ & bit(t); }
  std::string str() const;  // "BF16 or F32"

 private:
  explicit DTypeSet(uint32_t mask) : mask_(mask) {}
  static uint32_t bit(DType t) { return 1u << static_cast<unsigned>(t); }
  uint32_t mask_;
};

// An expected shape; -1 matches any size in that dimension.
inline constexpr int64_t kAnyDim = -1;

class WeightView;

class WeightStore {
 public:
  // Where the tensors came from: one entry per add() (a sharded index is one
  // source of several files).
  struct Source {
    std::string path;
    std::string format;  // "safetensors", "sharded safetensors", "pytorch"
    std::map<std::string, std::string> metadata;
    std::vector<const WeightFile*> files;
  };

  WeightStore();
  ~WeightStore();
  WeightStore(WeightStore&&) noexcept;
  WeightStore& operator=(WeightStore&&) noexcept;

  // add() each path in turn.
  static Expected<WeightStore> open(const std::vector<std::string>& paths);
  // Opens a file by its content: *.index.json is a sharded index, a zip is a
  // PyTorch checkpoint, anything else must be safetensors. A name already in
  // the store is an error naming both files; on error the store is unchanged.
  Status add(const std::string& path);
  // Adds an already opened file.
  Status add(std::unique_ptr<WeightFile> file);

  const std::vector<Source>& sources() const;
  size_t size() const;
  // The whole store as a view with an empty prefix.
  WeightView root() const;
  // A view of the names under prefix ("model.blocks" or "model.blocks.").
  WeightView view(std::string_view prefix) const;

  // Shorthands for root().
  bool has(std::string_view name) const;
  const TensorInfo* info(std::string_view name) const;
  std::vector<std::string> names() const;
  Expected<Tensor> get(std::string_view name, DTypeSet dtypes = DTypeSet::any()) const;
  Expected<Tensor> get(std::string_view name, DTypeSet dtypes, const Shape& shape) const;
  std::vector<std::string> unused() const;
  Status check_all_used() const;
  // WeightFile::release_pages of every file: call once the components have
  // packed their weights, so the mapped checkpoints stop counting as
  // resident memory. Views stay valid.
  void release_pages() const;

 private:
  friend class WeightView;
  struct State;
  Status add_files(std::vector<std::unique_ptr<WeightFile>> files, Source source);
  std::unique_ptr<State> state_;  // stable address: views point here
};

// The tensors under a name prefix. Names passed in and returned are relative
// to the prefix; errors use full names. Cheap to copy; valid while the store
// lives (moving the store keeps views valid).
class WeightView {
 public:
  const std::string& prefix() const { return prefix_; }
  // "blocks.3" -> prefix + "blocks.3."
  WeightView sub(std::string_view part) const;
  std::string full_name(std::string_view name) const { return prefix_ + std::string(name); }

  bool has(std::string_view name) const;
  // nullptr if absent. Does not count as a use.
  const TensorInfo* info(std::string_view name) const;
  // Relative names under the prefix, sorted.
  std::vector<std::string> names() const;
  // Distinct first components of the relative names ("0", "1", ... for a
  // list of blocks), sorted; numeric ones in numeric order.
  std::vector<std::string> children() const;

  // The record of a tensor that must exist with `ndim` dimensions (config
  // detection from shapes), or an error naming it. Does not count as a use.
  Expected<const TensorInfo*> require(std::string_view name, int ndim) const;
  // The tensor, checked for dtype and (if given) shape; marks it used.
  Expected<Tensor> get(std::string_view name, DTypeSet dtypes = DTypeSet::any()) const;
  Expected<Tensor> get(std::string_view name, DTypeSet dtypes, const Shape& shape) const;
  // Counts a tensor as used without loading it (known extras to skip).
  void mark_used(std::string_view name) const;
  // Full names under the prefix that no get() or mark_used() asked for.
  std::vector<std::string> unused() const;
  // An error listing unused() if it is not empty.
  Status check_all_used() const;
  // WeightStore::release_pages of the whole store: a loader that packs its
  // weights piece by piece calls it after each piece, so loading peaks at
  // the packed size plus one piece, not plus the whole mapped checkpoint.
  void release_pages() const;

 private:
  friend class WeightStore;
  WeightView(WeightStore::State* state, std::string prefix)
      : state_(state), prefix_(std::move(prefix)) {}
  Expected<Tensor> load(std::string_view name, DTypeSet dtypes, const Shape* shape) const;

  WeightStore::State* state_;
  std::string prefix_;  // empty or ends with '.'
};

}  // namespace flick
