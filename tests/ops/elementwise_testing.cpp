#include "tests/ops/elementwise_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "runtime/ref/data_iter.h"

namespace flick::testing {

const Tensor& Fixtures::get(const std::string& name) const {
  auto it = tensors.find(name);
  FLICK_CHECK(it != tensors.end(), "fixture tensor " + name + " missing");
  return it->second.t;
}

Fixtures load_fixtures(const std::string& file) {
  const std::string path = std::string(FLICK_TEST_DATA) + "/" + file;
  std::ifstream in(path, std::ios::binary);
  FLICK_CHECK(in.good(), "cannot open " + path);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json j = nlohmann::json::parse(header);
  Fixtures f;
  for (const auto& [name, info] : j.items()) {
    if (name == "__metadata__") {
      for (const auto& [c, params] : info.items()) {
        std::istringstream ss(params.get<std::string>());
        std::string kv;
        auto& m = f.cases[c];
        while (ss >> kv) {
          const size_t eq = kv.find('=');
          m[kv.substr(0, eq)] = kv.substr(eq + 1);
        }
      }
      continue;
    }
    const auto dt = dtype_from_name(info["dtype"].get<std::string>());
    FLICK_CHECK(dt.has_value(), "fixture " + name + ": dtype " + info["dtype"].dump());
    const Shape shape = Shape::from_vector(info["shape"].get<std::vector<int64_t>>());
    const auto off = info["data_offsets"].get<std::vector<size_t>>();
    OwnedTensor t(*dt, shape);
    FLICK_CHECK(off[1] - off[0] == t.t.nbytes() && off[1] <= data.size(), "fixture " + name);
    std::memcpy(t.t.data, data.data() + off[0], t.t.nbytes());
    f.tensors.emplace(name, std::move(t));
  }
  return f;
}

OwnedTensor random_tensor(DType dtype, Shape shape, uint64_t seed, double scale, double shift) {
  OwnedTensor t(dtype, shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (int64_t i = 0; i < t.t.numel(); ++i)
    store_from_f32(dtype, t.t.data, i, static_cast<float>(nd(rng) * scale + shift));
  return t;
}

OwnedTensor synthetic_image(int64_t n, int64_t c, int64_t h, int64_t w) {
  OwnedTensor t(DType::F32, {n, c, h, w});
  float* p = t.t.ptr<float>();
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < c; ++b)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const int64_t k = (y * 31 + x * 17 + b * 7 + a * 3 + (y * x) % 13) % 256;
          *p++ = static_cast<float>(k) / 127.5f - 1.f;
        }
  return t;
}

StridedTensor make_padded(DType dtype, Shape shape, int64_t pad) {
  StridedTensor s;
  s.t.dtype = dtype;
  s.t.shape = shape;
  int64_t acc = 1;
  for (int d = shape.ndim - 1; d >= 0; --d) {
    s.t.strides[static_cast<size_t>(d)] = acc;
    acc = acc * shape[d] + pad;
  }
  int64_t span = 1;
  for (int d = 0; d < shape.ndim; ++d) span += (shape[d] - 1) * s.t.stride(d);
  s.buffer = HostBuffer(static_cast<size_t>(span) * dtype_size(dtype));
  s.t.data = s.buffer.data();
  return s;
}

StridedTensor make_permuted(DType dtype, Shape shape, std::vector<int> order) {
  FLICK_CHECK(static_cast<int>(order.size()) == shape.ndim, "make_permuted: order rank");
  Shape storage;
  storage.ndim = shape.ndim;
  for (int k = 0; k < shape.ndim; ++k) storage[k] = shape[order[static_cast<size_t>(k)]];
  const auto cs = contiguous_strides(storage);
  StridedTensor s;
  s.t.dtype = dtype;
  s.t.shape = shape;
  for (int k = 0; k < shape.ndim; ++k)
    s.t.strides[static_cast<size_t>(order[static_cast<size_t>(k)])] = cs[static_cast<size_t>(k)];
  s.buffer = HostBuffer(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  s.t.data = s.buffer.data();
  return s;
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[static_cast<size_t>(i)] =
        load_as_f32(t.dtype, t.data, detail::offset_of(i, t.shape, t.strides));
  return v;
}

std::vector<double> broadcast_values(const Tensor& in, const Shape& out) {
  const detail::Strides st = detail::broadcast_strides(in, out, "broadcast_values");
  std::vector<double> v(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i)
    v[static_cast<size_t>(i)] = load_as_f32(in.dtype, in.data, detail::offset_of(i, out, st));
  return v;
}

void fill(Tensor& t, const std::vector<double>& v) {
  FLICK_CHECK(static_cast<int64_t>(v.size()) == t.numel(), "fill: size");
  for (int64_t i = 0; i < t.numel(); ++i)
    store_from_f32(t.dtype, t.data, detail::offset_of(i, t.shape, t.strides),
                   static_cast<float>(v[static_cast<size_t>(i)]));
}

OwnedTensor to_dtype(const Tensor& src, DType dtype) {
  OwnedTensor t(dtype, src.shape);
  fill(t.t, values(src));
  return t;
}

double round_to(DType dtype, double v) {
  const float f = static_cast<float>(v);
  switch (dtype) {
    case DType::BF16: return round_bf16(f);
    case DType::F16: return f16_to_f32(f32_to_f16(f));
    default: return f;
  }
}

namespace {

bool within(DType dt, double a, double e, double tol) {
  if (std::isnan(e)) return std::isnan(a);
  if (std::isinf(e)) return a == e;
  if (std::isnan(a)) return false;
  if (dt == DType::F32) return std::fabs(a - e) <= tol;
  return round_to(dt, e - tol) <= a && a <= round_to(dt, e + tol);
}

}  // namespace

int64_t expect_close(const Tensor& actual, const std::vector<double>& expected,
                     const std::vector<double>& tol, const std::string& what) {
  const std::vector<double> a = values(actual);
  EXPECT_EQ(a.size(), expected.size()) << what;
  if (a.size() != expected.size()) return 1;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (within(actual.dtype, a[i], expected[i], tol[i])) continue;
    if (++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << expected[i]
                    << " +- " << tol[i] << " (" << dtype_name(actual.dtype) << ")";
  }
  if (bad > 5) ADD_FAILURE() << what << ": " << bad << " of " << a.size() << " elements off";
  return bad;
}

int64_t expect_equal(const Tensor& actual, const Tensor& expected, const std::string& what) {
  EXPECT_EQ(actual.shape, expected.shape) << what;
  const std::vector<double> a = values(actual), e = values(expected);
  int64_t bad = 0;
  for (size_t i = 0; i < std::min(a.size(), e.size()); ++i) {
    if (a[i] == e[i] || (std::isnan(a[i]) && std::isnan(e[i]))) continue;
    if (++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << e[i];
  }
  if (bad > 5) ADD_FAILURE() << what << ": " << bad << " of " << a.size() << " elements differ";
  return bad;
}

double max_ulp_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double e = expected[i], a = actual[i];
    if (std::isnan(e) || std::isinf(e)) continue;
    int exp2 = 0;
    std::frexp(std::max(std::fabs(e), 0x1p-126), &exp2);  // |e| in [2^(exp2-1), 2^exp2)
    const double ulp = std::ldexp(1.0, exp2 - 24);
    worst = std::max(worst, std::fabs(a - e) / ulp);
  }
  return worst;
}

}  // namespace flick::testing
