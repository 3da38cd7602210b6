// Quantized weights (q8, q4): the one quantization rule, and a product whose rows are the bytes
// of a plain scalar reference written here, alone or among any rows, on any thread count and
// under every instruction set.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/quant_call.h"
#include "recur/error.h"
#include "recur/isa.h"
#include "recur/safetensors.h"

using recur::kernels::PackedMatrix;
using recur::kernels::QuantizedRows;
using recur::kernels::QuantType;
using recur::kernels::kQuantBlock;

namespace {

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

int code_at(const QuantizedRows& q, int n, int k) {
  const std::size_t at = static_cast<std::size_t>(n) * std::size_t(q.k_in) + std::size_t(k);
  if (q.type == QuantType::kQ8) return static_cast<std::int8_t>(q.codes[at]);
  const int j = k % kQuantBlock;
  const std::uint8_t byte = q.codes[(at - std::size_t(j)) / 2 + std::size_t(j % 16)];
  return (j < 16 ? byte & 0x0f : byte >> 4) - 8;
}

float scale_at(const QuantizedRows& q, int n, int b) {
  return recur::f16_to_float(q.scales[std::size_t(n) * std::size_t(q.blocks_per_row()) + std::size_t(b)]);
}

// The rule of docs/quantization.md written out plainly: activations per block of 32
// (std::nearbyint rounds half to even in the default rounding mode), integer dots in 64 bits,
// and each output's blocks in one fma chain, ascending (or descending, for the negative control).
std::vector<float> reference(const QuantizedRows& q, const float* X, int rows, int ldx,
                             bool descending = false) {
  const int blocks = q.blocks_per_row();
  std::vector<float> Y(static_cast<std::size_t>(rows) * std::size_t(q.n_out));
  std::vector<int> qx(static_cast<std::size_t>(q.k_in));
  std::vector<float> dx(static_cast<std::size_t>(blocks));
  for (int r = 0; r < rows; ++r) {
    const float* x = X + static_cast<std::ptrdiff_t>(r) * ldx;
    for (int b = 0; b < blocks; ++b) {
      float m = 0.0f;
      for (int j = 0; j < kQuantBlock; ++j) m = std::max(m, std::fabs(x[b * kQuantBlock + j]));
      if (m < FLT_MIN) {
        dx[std::size_t(b)] = 0.0f;
        for (int j = 0; j < kQuantBlock; ++j) qx[std::size_t(b * kQuantBlock + j)] = 0;
        continue;
      }
      dx[std::size_t(b)] = m / 127.0f;
      const float inv = 127.0f / m;
      for (int j = 0; j < kQuantBlock; ++j)
        qx[std::size_t(b * kQuantBlock + j)] = static_cast<int>(std::nearbyint(x[b * kQuantBlock + j] * inv));
    }
    for (int n = 0; n < q.n_out; ++n) {
      float y = 0.0f;
      for (int i = 0; i < blocks; ++i) {
        const int b = descending ? blocks - 1 - i : i;
        std::int64_t isum = 0;
        for (int j = 0; j < kQuantBlock; ++j)
          isum += std::int64_t(code_at(q, n, b * kQuantBlock + j)) * qx[std::size_t(b * kQuantBlock + j)];
        const float s = scale_at(q, n, b) * dx[std::size_t(b)];
        y = std::fma(static_cast<float>(isum), s, y);
      }
      Y[std::size_t(r) * std::size_t(q.n_out) + std::size_t(n)] = y;
    }
  }
  return Y;
}

// The activation rule in plain loops, every edge spelled out (blocks below FLT_MIN, NaN, the
// clamps): the oracle every table's kernel is held to, byte for byte.
void plain_activations(const float* X, std::int64_t rows, std::int64_t ldx, int k_in,
                       std::int8_t* qx, float* dx, std::int32_t* xsum) {
  const int blocks = k_in / kQuantBlock;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int b = 0; b < blocks; ++b) {
      const float* x = X + r * ldx + b * kQuantBlock;
      std::int8_t* q = qx + r * k_in + b * kQuantBlock;
      const std::int64_t at = r * blocks + b;
      // m = max |x_j|. The maximum of numbers that are not NaN is the same in any order (a NaN
      // loses every comparison and is skipped in any order too), so it is taken in 8
      // independent lanes, which the compiler vectorizes, and the lanes are then combined.
      float lane[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      for (int j = 0; j < kQuantBlock; j += 8)
        for (int i = 0; i < 8; ++i) {
          const float a = std::fabs(x[j + i]);
          lane[i] = a > lane[i] ? a : lane[i];
        }
      float m = 0.0f;
      for (const float a : lane) m = a > m ? a : m;
      // Below the smallest normal float, 127 / m could overflow: such a block counts as zero.
      // (The negated test also sends a NaN here, which upstream checks keep out anyway.)
      if (!(m >= FLT_MIN)) {
        std::memset(q, 0, kQuantBlock);
        dx[at] = 0.0f;
        xsum[at] = 0;
        continue;
      }
      dx[at] = m / 127.0f;
      const float inv = 127.0f / m;
      std::int32_t s = 0;
      for (int j = 0; j < kQuantBlock; ++j) {
        // |x * inv| <= 127 (1 + 2^-24)^2 < 127.5, so the code is in [-127, 127]; the clamp only
        // guards against undefined behaviour should an input be non-finite after all.
        float v = (x[j] * inv + 12582912.0f) - 12582912.0f;  // half to even
        v = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
        const auto c = static_cast<std::int8_t>(v == v ? v : 0.0f);
        q[j] = c;
        s += c;
      }
      xsum[at] = s;
    }
  }
}

bool same_bytes(const float* a, const float* b, std::size_t n) {
  return std::memcmp(a, b, sizeof(float) * n) == 0;
}

}  // namespace

TEST_CASE("quant: names parse both ways and unknown ones are refused", "[quant]") {
  for (const QuantType t : {QuantType::kQ8, QuantType::kQ4})
    CHECK(recur::kernels::parse_quant(recur::kernels::quant_name(t), "test") == t);
  CHECK_THROWS_AS(recur::kernels::parse_quant("q5", "test"), recur::ArgumentError);
  CHECK_THROWS_WITH(recur::kernels::parse_quant("int8", "recur quantize"),
                    Catch::Contains("[recur quantize]") && Catch::Contains("int8"));
}

TEST_CASE("quant: q8 codes follow the rule (zeros, the largest magnitude, ties to even, tiny steps)",
          "[quant]") {
  // Row 0: a zero block, then a block whose step is exactly 2^-7 (m = 127 * 2^-7), so that the
  // ties below are exact: w / d = 2.5, 3.5, -2.5, -0.5, 0.5.
  // Row 1: a block whose step is a subnormal half, where m / d rounds past 127: clamped, never -128.
  std::vector<float> w(2 * 64, 0.0f);
  const float d = 1.0f / 128.0f;
  float* b1 = w.data() + 32;
  b1[0] = 127 * d;
  b1[1] = -127 * d;
  b1[2] = 2.5f * d;
  b1[3] = 3.5f * d;
  b1[4] = -2.5f * d;
  b1[5] = -0.5f * d;
  b1[6] = 0.5f * d;
  b1[7] = 1.5f * d;
  float* tiny = w.data() + 64;
  tiny[0] = -1.06e-5f;  // m / 127 = 1.4 * 2^-24 rounds down to the half 2^-24
  tiny[1] = 1.0e-5f;
  tiny[2] = 3e-7f;
  const QuantizedRows q = recur::kernels::quantize_rows(w.data(), 2, 64, QuantType::kQ8);
  REQUIRE(q.codes.size() == 128);
  REQUIRE(q.scales.size() == 4);
  CHECK(q.scales[0] == 0);
  for (int k = 0; k < 32; ++k) CHECK(code_at(q, 0, k) == 0);
  CHECK(scale_at(q, 0, 1) == d);
  const int want[] = {127, -127, 2, 4, -2, 0, 0, 2};
  for (int k = 0; k < 8; ++k) CHECK(code_at(q, 0, 32 + k) == want[k]);
  CHECK(scale_at(q, 1, 0) > 0.0f);
  CHECK(scale_at(q, 1, 0) == std::ldexp(1.0f, -24));  // rounded down into the subnormals
  CHECK(code_at(q, 1, 0) == -127);                     // -1.06e-5 / 2^-24 = -177.8: clamped
  CHECK(code_at(q, 1, 1) == 127);
  CHECK(code_at(q, 1, 2) == 5);
  for (std::uint8_t c : q.codes) CHECK(c != 0x80);
  // A step below the smallest half subnormal: scale 0 and codes 0.
  std::vector<float> z(32, 0.0f);
  z[3] = 1e-9f;
  const QuantizedRows qz = recur::kernels::quantize_rows(z.data(), 1, 32, QuantType::kQ8);
  CHECK(qz.scales[0] == 0);
  CHECK(code_at(qz, 0, 3) == 0);
}

TEST_CASE("quant: -128 is never produced, whatever the weights", "[quant]") {
  for (float sd : {1.0f, 1e-3f, 1e-6f, 300.0f}) {
    const std::vector<float> w = random_values(64 * 256, 11, sd);
    const QuantizedRows q = recur::kernels::quantize_rows(w.data(), 64, 256, QuantType::kQ8);
    std::size_t minus_128 = 0;
    for (std::uint8_t c : q.codes) minus_128 += c == 0x80;
    CHECK(minus_128 == 0);
  }
}

TEST_CASE("quant: q4 codes and nibbles (negative side 8 steps, positive 7)", "[quant]") {
  // Block 0: lo = -8/16, hi = 7/16: step exactly 1/16. Block 1: only positive values, hi = 1:
  // the step is 1/7 (as a half) and 1 takes code 7. Block 2: zeros, code 0 = nibble 8.
  std::vector<float> w(96, 0.0f);
  w[0] = -0.5f;
  w[1] = 0.4375f;
  w[16] = 0.125f;   // element 16: the high nibble of byte 0
  w[17] = -0.1875f;
  w[5] = 0.09375f;  // 1.5 steps: a tie, to 2
  w[6] = 0.15625f;  // 2.5 steps: to 2
  w[32] = 1.0f;
  w[33] = 0.5f;
  const QuantizedRows q = recur::kernels::quantize_rows(w.data(), 1, 96, QuantType::kQ4);
  REQUIRE(q.codes.size() == 48);
  CHECK(scale_at(q, 0, 0) == 1.0f / 16.0f);
  CHECK(code_at(q, 0, 0) == -8);
  CHECK(code_at(q, 0, 1) == 7);
  CHECK(code_at(q, 0, 16) == 2);
  CHECK(code_at(q, 0, 17) == -3);
  CHECK(code_at(q, 0, 5) == 2);
  CHECK(code_at(q, 0, 6) == 2);
  CHECK(q.codes[0] == ((2 + 8) << 4 | (-8 + 8)));   // element 0 low, element 16 high
  CHECK(q.codes[1] == ((-3 + 8) << 4 | (7 + 8)));
  CHECK(q.codes[2] == 0x88);
  CHECK(scale_at(q, 0, 1) == recur::f16_to_float(recur::float_to_f16(1.0f / 7.0f)));
  CHECK(code_at(q, 0, 32) == 7);
  CHECK(code_at(q, 0, 33) == 4);  // 3.5 steps (to a half's precision): to 4
  CHECK(q.scales[2] == 0);
  for (int k = 64; k < 96; ++k) CHECK(code_at(q, 0, k) == 0);
}

TEST_CASE("quant: dequantized weights quantize back to the same codes and scales", "[quant]") {
  for (const QuantType t : {QuantType::kQ8, QuantType::kQ4}) {
    const int n_out = 37, k_in = 96;
    const std::vector<float> w = random_values(std::size_t(n_out * k_in), 21);
    const QuantizedRows q = recur::kernels::quantize_rows(w.data(), n_out, k_in, t);
    std::vector<float> back(w.size());
    recur::kernels::dequantize_rows(q, back.data());
    // Within half a step of the weight, every weight of the block (no clamping at these sizes).
    for (int n = 0; n < n_out; ++n)
      for (int k = 0; k < k_in; ++k) {
        const std::size_t at = std::size_t(n * k_in + k);
        INFO(recur::kernels::quant_name(t) << " (" << n << ", " << k << ")");
        REQUIRE(std::fabs(back[at] - w[at]) <= 0.5f * scale_at(q, n, k / kQuantBlock) * 1.0001f);
      }
    const QuantizedRows again = recur::kernels::quantize_rows(back.data(), n_out, k_in, t);
    CHECK(again.codes == q.codes);
    CHECK(again.scales == q.scales);
  }
}

TEST_CASE("quant: bad weights and inconsistent quantized rows are refused", "[quant]") {
  std::vector<float> w(64, 0.5f);
  CHECK_THROWS_AS(recur::kernels::quantize_rows(w.data(), 2, 31, QuantType::kQ8), recur::ArgumentError);
  w[40] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(recur::kernels::quantize_rows(w.data(), 2, 32, QuantType::kQ4),
                    Catch::Contains("[quantize_rows]") && Catch::Contains("(1, 8)"));
  w[40] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(recur::kernels::quantize_rows(w.data(), 2, 32, QuantType::kQ8), recur::ArgumentError);
  w[40] = 1e10f;  // a step beyond the largest half
  CHECK_THROWS_AS(recur::kernels::quantize_rows(w.data(), 2, 32, QuantType::kQ8), recur::ArgumentError);

  const std::vector<float> ok = random_values(64 * 2, 3);
  const QuantizedRows good = recur::kernels::quantize_rows(ok.data(), 2, 64, QuantType::kQ8);
  CHECK_NOTHROW(recur::kernels::check_quantized(good, "w"));
  QuantizedRows bad = good;
  bad.codes.pop_back();
  CHECK_THROWS_AS(recur::kernels::check_quantized(bad, "w"), recur::FormatError);
  bad = good;
  bad.scales.push_back(0);
  CHECK_THROWS_AS(recur::kernels::check_quantized(bad, "w"), recur::FormatError);
  bad = good;
  bad.codes[7] = 0x80;
  CHECK_THROWS_WITH(recur::kernels::check_quantized(bad, "layers.0.w"),
                    Catch::Contains("layers.0.w") && Catch::Contains("-128"));
  bad = good;
  bad.scales[1] = 0x7c00;  // +inf
  CHECK_THROWS_AS(recur::kernels::check_quantized(bad, "w"), recur::FormatError);
  bad = good;
  bad.scales[1] = 0xbc00;  // -1
  CHECK_THROWS_AS(recur::kernels::check_quantized(bad, "w"), recur::FormatError);
  bad = good;
  bad.k_in = 48;
  CHECK_THROWS_AS(recur::kernels::check_quantized(bad, "w"), recur::FormatError);
  CHECK_THROWS_AS(PackedMatrix(bad), recur::FormatError);
}

TEST_CASE("quant: activations are quantized per block by the one rule", "[quant]") {
  std::vector<float> x(96, 0.0f);
  x[0] = 127.0f;  // m = 127: inv = 1, so the codes are the values rounded half to even
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  x[4] = 1.5f;
  x[5] = -126.5f;
  // Block 1 is zero; block 2 lies below the smallest normal float: treated as zero.
  x[70] = 1e-39f;
  std::vector<std::int8_t> qx(96);
  std::vector<float> dx(3);
  std::vector<std::int32_t> xs(3);
  recur::kernels::quantize_activations(x.data(), 1, 96, 96, qx.data(), dx.data(), xs.data());
  CHECK(dx[0] == 1.0f);
  const int want[] = {127, 2, -2, 0, 2, -126};
  for (int j = 0; j < 6; ++j) CHECK(int(qx[std::size_t(j)]) == want[j]);
  CHECK(xs[0] == 127 + 2 - 2 + 0 + 2 - 126);
  CHECK(dx[1] == 0.0f);
  CHECK(dx[2] == 0.0f);
  CHECK(int(qx[70]) == 0);
}

TEST_CASE("quant: every table's activation quantizer gives the rule's bytes, edges included",
          "[quant][exact][isa]") {
  // Blocks of: normal values, ties after scaling (m = 127), zeros, -0, values below the smallest
  // normal float, one at FLT_MIN, a huge one, an infinity and a NaN among finite values, and
  // the largest float. Rows are strided.
  const int k_in = 32 * 12, rows = 3, ldx = k_in + 5;
  std::vector<float> X = random_values(std::size_t(rows * ldx), 71, 4.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int j = 0; j < 32; ++j) {
    X[std::size_t(32 + j)] = float(j % 2 ? j : -j) + 0.5f;  // block 1: ties
    X[std::size_t(64 + j)] = 0.0f;
    X[std::size_t(96 + j)] = -0.0f;
    X[std::size_t(128 + j)] = 1e-39f * float(j);  // below FLT_MIN
  }
  X[32] = 127.0f;
  X[160 + 3] = FLT_MIN;
  X[192 + 7] = 3e38f;
  X[224 + 9] = inf;
  X[256 + 11] = nan;
  X[288 + 31] = -std::numeric_limits<float>::max();
  X[std::size_t(ldx + 40)] = -inf;
  const std::size_t codes = std::size_t(rows * k_in), blocks = codes / 32;
  std::vector<std::int8_t> want_q(codes);
  std::vector<float> want_d(blocks);
  std::vector<std::int32_t> want_s(blocks);
  plain_activations(X.data(), rows, ldx, k_in, want_q.data(), want_d.data(), want_s.data());
  // The oracle is itself the rule: block 1's ties round to even.
  CHECK(want_d[1] == 1.0f);
  CHECK(int(want_q[33]) == 2);  // 1.5
  CHECK(int(want_q[35]) == 4);  // 3.5
  CHECK(int(want_q[34]) == -2);  // -2.5
  const std::string before = recur::isa();
  for (const std::string& isa : recur::available_isas()) {
    recur::set_isa(isa);
    INFO(isa);
    std::vector<std::int8_t> q(codes, 99);
    std::vector<float> d(blocks, -1.0f);
    std::vector<std::int32_t> s(blocks, -1);
    recur::kernels::quantize_activations(X.data(), rows, ldx, k_in, q.data(), d.data(), s.data());
    CHECK(std::memcmp(q.data(), want_q.data(), codes) == 0);
    CHECK(std::memcmp(d.data(), want_d.data(), blocks * sizeof(float)) == 0);
    CHECK(std::memcmp(s.data(), want_s.data(), blocks * sizeof(std::int32_t)) == 0);
  }
  recur::set_isa(before);
}

TEST_CASE("quant: every row of the product is the reference's bytes, for any rows and threads",
          "[quant][exact]") {
  for (const QuantType t : {QuantType::kQ8, QuantType::kQ4}) {
    // n_out: a partial panel, less than one, whole panels, more than the 8 panels decode reads
    // at once; k_in: one block and many.
    for (const auto& [n_out, k_in] : std::vector<std::pair<int, int>>{{100, 64}, {7, 32}, {48, 512}, {33, 160}, {200, 96}}) {
      const std::vector<float> w = random_values(std::size_t(n_out * k_in), 31);
      const QuantizedRows q = recur::kernels::quantize_rows(w.data(), n_out, k_in, t);
      const PackedMatrix P(q);
      CHECK(P.quantized());
      CHECK(P.quant_type() == t);
      CHECK(P.n_out() == n_out);
      const std::size_t record = t == QuantType::kQ8 ? 544 : 288;
      CHECK(P.bytes() == std::size_t((n_out + 15) / 16) * std::size_t(k_in / 32) * record);
      const int rows = 64;
      const int ldx = k_in + 3;  // strided rows
      std::vector<float> X = random_values(std::size_t(rows * ldx), 32);
      for (int k = 0; k < 32; ++k) X[std::size_t(5 * ldx + k)] = 0.0f;  // a zero block
      const std::vector<float> want = reference(q, X.data(), rows, ldx);
      for (int threads : {1, 2, 3}) {
        for (int first : {0, 1, 5}) {
          for (int count : {1, 2, 3, 4, 5, 7, 13, 64 - first}) {
            if (first + count > rows) continue;
            std::vector<float> Y(std::size_t(count * (n_out + 2)), -7.0f);
            P.multiply(X.data() + first * ldx, count, ldx, Y.data(), n_out + 2, threads);
            bool same = true, untouched = true;
            for (int r = 0; r < count; ++r) {
              same = same && same_bytes(Y.data() + r * (n_out + 2),
                                        want.data() + (first + r) * n_out, std::size_t(n_out));
              untouched = untouched && Y[std::size_t(r * (n_out + 2) + n_out)] == -7.0f &&
                          Y[std::size_t(r * (n_out + 2) + n_out + 1)] == -7.0f;
            }
            INFO(recur::kernels::quant_name(t) << ", " << n_out << " x " << k_in << ", rows "
                 << first << ".." << first + count << ", threads " << threads << ", isa "
                 << recur::isa());
            REQUIRE(same);
            REQUIRE(untouched);
          }
        }
      }
    }
  }
}

TEST_CASE("quant: the product is close to the float product of the dequantized weights",
          "[quant]") {
  for (const QuantType t : {QuantType::kQ8, QuantType::kQ4}) {
    const int n_out = 40, k_in = 256;
    const std::vector<float> w = random_values(std::size_t(n_out * k_in), 41);
    const QuantizedRows q = recur::kernels::quantize_rows(w.data(), n_out, k_in, t);
    const std::vector<float> x = random_values(std::size_t(k_in), 42);
    std::vector<float> y(static_cast<std::size_t>(n_out));
    PackedMatrix(q).multiply(x.data(), 1, k_in, y.data(), n_out, 1);
    std::vector<float> wq(w.size());
    recur::kernels::dequantize_rows(q, wq.data());
    double worst = 0;
    for (int n = 0; n < n_out; ++n) {
      double exact = 0;
      for (int k = 0; k < k_in; ++k) exact += double(wq[std::size_t(n * k_in + k)]) * double(x[std::size_t(k)]);
      worst = std::max(worst, std::fabs(exact - double(y[std::size_t(n)])));
    }
    // The activations' rounding: at most half a step of max|x| / 127 per input, times |w|.
    constexpr double kActivationError = 0.05;
    INFO(recur::kernels::quant_name(t) << ": largest difference " << worst);
    CHECK(worst < kActivationError * std::sqrt(double(k_in)));
  }
}

TEST_CASE("quant: another block order gives other bytes (the test can fail)", "[quant][exact]") {
  const int n_out = 64, k_in = 512;
  const std::vector<float> w = random_values(std::size_t(n_out * k_in), 51);
  const QuantizedRows q = recur::kernels::quantize_rows(w.data(), n_out, k_in, QuantType::kQ8);
  const std::vector<float> X = random_values(std::size_t(4 * k_in), 52);
  std::vector<float> Y(std::size_t(4 * n_out));
  PackedMatrix(q).multiply(X.data(), 4, k_in, Y.data(), n_out, 1);
  const std::vector<float> ascending = reference(q, X.data(), 4, k_in);
  const std::vector<float> descending = reference(q, X.data(), 4, k_in, true);
  CHECK(same_bytes(Y.data(), ascending.data(), Y.size()));
  CHECK_FALSE(same_bytes(Y.data(), descending.data(), Y.size()));
}

TEST_CASE("quant: every instruction set gives the scalar target's bytes", "[quant][exact][isa]") {
  const std::string before = recur::isa();
  for (const QuantType t : {QuantType::kQ8, QuantType::kQ4}) {
    const int n_out = 290, k_in = 320;  // 18 panels and a part: decode's groups of 8 and a tail
    const std::vector<float> w = random_values(std::size_t(n_out * k_in), 61);
    const PackedMatrix P(recur::kernels::quantize_rows(w.data(), n_out, k_in, t));
    const std::vector<float> X = random_values(std::size_t(9 * k_in), 62, 3.0f);
    std::vector<float> scalar;
    std::vector<std::pair<std::string, std::vector<float>>> runs;
    for (const std::string& isa : recur::available_isas()) {
      recur::set_isa(isa);
      std::vector<float> Y(std::size_t(9 * n_out));
      P.multiply(X.data(), 9, k_in, Y.data(), n_out, 2);
      P.multiply(X.data(), 1, k_in, Y.data(), n_out, 1);  // row 0 again, through decode
      if (isa == "scalar") scalar = Y;
      runs.emplace_back(isa, Y);
    }
    recur::set_isa(before);
    REQUIRE(!scalar.empty());
    for (const auto& [isa, Y] : runs) {
      INFO(recur::kernels::quant_name(t) << ": " << isa << " against scalar");
      CHECK(same_bytes(Y.data(), scalar.data(), Y.size()));
    }
  }
}
