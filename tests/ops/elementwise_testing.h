// Helpers of the elementwise / norm / resample / data op tests: fixture
// loading, deterministic inputs, strided views and tolerance checks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace flick::testing {

inline constexpr double kF32Eps = 1.0 / (1 << 24);  // unit roundoff of fp32: half an ulp at 1
inline constexpr double kBf16Ulp = 1.0 / (1 << 7);  // bf16 ulp at 1

// A safetensors file of torch-computed cases (tools/gen_op_fixtures.py):
// tensors "<case>.<name>" and, per case, metadata "key=value ...".
struct Fixtures {
  std::map<std::string, OwnedTensor> tensors;
  std::map<std::string, std::map<std::string, std::string>> cases;
  const Tensor& get(const std::string& name) const;
  bool has(const std::string& name) const { return tensors.count(name) != 0; }
};
Fixtures load_fixtures(const std::string& file);  // path relative to tests/data

// Normal(shift, scale) values rounded to dtype; deterministic in seed.
OwnedTensor random_tensor(DType dtype, Shape shape, uint64_t seed, double scale = 1.0,
                          double shift = 0.0);
// The synthetic 8-bit-like image of tools/gen_op_fixtures.py: k / 127.5 - 1.
OwnedTensor synthetic_image(int64_t n, int64_t c, int64_t h, int64_t w);

// A view of `shape` inside a larger zeroed buffer: every dim's stride is
// padded (by `pad` elements per row level), so no dim is contiguous except the
// last. `permute`d storage order: storage dims given by `order` (a permutation
// of the view's dims, outermost first).
struct StridedTensor {
  HostBuffer buffer;
  Tensor t;
  operator Tensor&() { return t; }
  operator const Tensor&() const { return t; }
};
StridedTensor make_padded(DType dtype, Shape shape, int64_t pad);
StridedTensor make_permuted(DType dtype, Shape shape, std::vector<int> storage_order);

// Element values (row-major over the view) as double.
std::vector<double> values(const Tensor& t);
// Values of `in` read at every (row-major) index of `out` under broadcasting.
std::vector<double> broadcast_values(const Tensor& in, const Shape& out);
// Fills a (possibly strided) view with the row-major values v.
void fill(Tensor& t, const std::vector<double>& v);
// Copies src's values into a new tensor of dtype/shape (rounding to dtype).
OwnedTensor to_dtype(const Tensor& src, DType dtype);

// Rounds v to dtype (F32/BF16/F16) as the stores do.
double round_to(DType dtype, double v);

// Checks actual against exact expected values with an absolute tolerance per
// element on the fp32 value. For a BF16/F16 output the stored value must be
// the rounding of some value within the band [e - tol, e + tol]: one rounding
// of a result within fp32 tolerance. Reports the first failures with `what`.
// Returns the number of mismatches.
int64_t expect_close(const Tensor& actual, const std::vector<double>& expected,
                     const std::vector<double>& tol, const std::string& what);
// Exact equality of values (NaN equals NaN).
int64_t expect_equal(const Tensor& actual, const Tensor& expected, const std::string& what);

// Largest |a - e| / ulp(e) in fp32 ulps over the elements (|e| below the
// smallest normal counts in units of the smallest normal's ulp).
double max_ulp_error(const std::vector<double>& actual, const std::vector<double>& expected);

}  // namespace flick::testing
