#include "runtime/random.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "runtime/dtype.h"

namespace flick {
namespace {

// Cephes log as in ATen's avx_mathfun.h log256_ps, one lane, with the FMA
// contractions GCC applies to it there (each noted). Valid for x in (0, 1].
float cephes_logf(float v) {
  uint32_t bits = f32_bits(v);
  float e = static_cast<float>(static_cast<int32_t>(bits >> 23) - 0x7f) + 1.0f;
  float x = f32_from_bits((bits & ~0x7f800000u) | 0x3f000000u);  // mantissa in [0.5, 1)
  float tmp = 0.0f;
  if (x < 0.707106781186547524f) {
    tmp = x;
    e -= 1.0f;
  }
  x = (x - 1.0f) + tmp;
  const float z = x * x;
  static constexpr float kP[] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                                 -1.2420140846E-1f, 1.4249322787E-1f,  -1.6668057665E-1f,
                                 2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
  float y = kP[0];
  for (int i = 1; i < 9; ++i) y = std::fma(y, x, kP[i]);  // y*x + p fused
  y = y * x;
  y = std::fma(y, z, e * -2.12194440e-4f);  // y*z + e*q1: first mult fused
  y = std::fma(-z, 0.5f, y);                // y - z*0.5 fused
  x = x + y;
  return std::fma(e, 0.693359375f, x);  // x + e*q2 fused
}

// Cephes sincos as in avx_mathfun.h sincos256_ps, one lane, FMAs as compiled.
void cephes_sincosf(float v, float* s, float* c) {
  bool sign_sin = v < 0;
  float x = std::fabs(v);
  int32_t j = static_cast<int32_t>(x * 1.27323954473516f);  // 4/pi, truncation
  j = (j + 1) & ~1;
  const float y = static_cast<float>(j);
  const bool swap_sign_sin = (j & 4) != 0;
  const bool poly_is_sin = (j & 2) == 0;
  x = std::fma(y, -0.78515625f, x);
  x = std::fma(y, -2.4187564849853515625e-4f, x);
  x = std::fma(y, -3.77489497744594108e-8f, x);
  const bool sign_cos = ((~(j - 2)) & 4) != 0;
  sign_sin = sign_sin != swap_sign_sin;
  const float z = x * x;
  float yc = 2.443315711809948E-005f;
  yc = std::fma(yc, z, -1.388731625493765E-003f);
  yc = std::fma(yc, z, 4.166664568298827E-002f);
  yc = yc * z;
  yc = std::fma(yc, z, -(z * 0.5f));
  yc = yc + 1.0f;
  float ys = -1.9515295891E-4f;
  ys = std::fma(ys, z, 8.3321608736E-3f);
  ys = std::fma(ys, z, -1.6666654611E-1f);
  ys = ys * z;
  ys = std::fma(ys, x, x);
  const float sin_v = poly_is_sin ? ys : yc;
  const float cos_v = poly_is_sin ? yc : ys;
  *s = sign_sin ? -sin_v : sin_v;
  *c = sign_cos ? -cos_v : cos_v;
}

// ATen NormalFill16 (AVX2): data[0..8) -> radius*cos, data[8..16) -> radius*sin.
void box_muller_16(float* data) {
  const float two_pi = static_cast<float>(2.0f * std::numbers::pi);
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j];
    const float u2 = data[j + 8];
    const float radius = std::sqrt(-2.0f * cephes_logf(u1));
    float s, c;
    cephes_sincosf(two_pi * u2, &s, &c);
    data[j] = radius * c;  // fmadd(n, std=1, mean=0) is exact
    data[j + 8] = radius * s;
  }
}

}  // namespace

TorchGenerator::TorchGenerator(uint64_t seed) : engine_(static_cast<uint32_t>(seed)) {}

uint32_t TorchGenerator::random() { return static_cast<uint32_t>(engine_()); }

uint64_t TorchGenerator::random64() {
  const uint64_t hi = random();
  const uint64_t lo = random();
  return (hi << 32) | lo;
}

float TorchGenerator::uniform_float() {
  return static_cast<float>(random() & ((1u << 24) - 1)) * (1.0f / (1u << 24));
}

double TorchGenerator::uniform_double() {
  return static_cast<double>(random64() & ((1ull << 53) - 1)) * (1.0 / (1ull << 53));
}

double TorchGenerator::normal_double() {
  if (next_double_normal_) {
    const double v = *next_double_normal_;
    next_double_normal_.reset();
    return v;
  }
  const double u1 = uniform_double();
  const double u2 = uniform_double();
  const double r = std::sqrt(-2.0 * std::log1p(-u2));
  const double theta = 2.0 * std::numbers::pi * u1;
  next_double_normal_ = r * std::sin(theta);
  return r * std::cos(theta);
}

void TorchGenerator::randn(float* out, int64_t n) {
  if (n < 16) {  // torch's scalar path: double normal, cast
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(normal_double());
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = uniform_float();
  for (int64_t i = 0; i + 16 <= n; i += 16) box_muller_16(out + i);
  if (n % 16 != 0) {  // torch recomputes the last 16 from fresh uniforms
    float* tail = out + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform_float();
    box_muller_16(tail);
  }
}

void TorchGenerator::randn_bf16(uint16_t* out, int64_t n) {
  if (n < 16) {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(static_cast<float>(normal_double()));
    return;
  }
  // Draws 16 uniforms per block (the same stream order as the float path for
  // full blocks), then the last 16 again from fresh draws.
  float buf[16];
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    for (float& b : buf) b = uniform_float();
    box_muller_16(buf);
    for (int j = 0; j < 16; ++j) out[i + j] = f32_to_bf16(buf[j]);
  }
  if (n % 16 != 0) {
    for (float& b : buf) b = uniform_float();
    box_muller_16(buf);
    for (int j = 0; j < 16; ++j) out[n - 16 + j] = f32_to_bf16(buf[j]);
  }
}

}  // namespace flick
