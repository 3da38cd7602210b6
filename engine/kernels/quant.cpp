#include "kernels/quant.h"

#include <cmath>

#include "kernels/dispatch.h"
#include "kernels/quant_call.h"
#include "recur/error.h"
#include "recur/dtype.h"
#include "util/check.h"

namespace recur::kernels {
namespace {

// Round to nearest, ties to even, for |v| < 2^22: the add-and-subtract of 1.5 * 2^23, the same
// rounding the kernels use (ops-inl.h, RoundEven); without fast-math the compiler keeps both
// operations.
float round_even(float v) { return (v + 12582912.0f) - 12582912.0f; }

// The largest half is 65504; m / 127 (or the q4 step) must round to a finite half.
constexpr float kMaxScale = 65504.0f;

[[noreturn]] void format_fail(const char* what, const std::string& message) {
  throw FormatError(fmt::format("{}: {}", what, message));
}

}  // namespace

const char* quant_name(QuantType type) {
  switch (type) {
    case QuantType::kQ8: return "q8";
    case QuantType::kQ4: return "q4";
  }
  return "?";
}

QuantType parse_quant(std::string_view name, const char* call) {
  if (name == "q8") return QuantType::kQ8;
  if (name == "q4") return QuantType::kQ4;
  detail::throw_argument(call, "unknown quantization \"{}\" (known: q8, q4)", name);
}

QuantizedRows quantize_rows(const float* w, int n_out, int k_in, QuantType type) {
  constexpr const char* call = "quantize_rows";
  if (n_out < 0 || k_in < 0 || k_in % kQuantBlock != 0)
    detail::throw_argument(call, "a ({}, {}) weight: k_in must be a multiple of {}", n_out, k_in,
                           kQuantBlock);
  const std::size_t n = static_cast<std::size_t>(n_out) * static_cast<std::size_t>(k_in);
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(w[i]))
      detail::throw_argument(call, "weight ({}, {}) of a ({}, {}) matrix is {}", i / std::size_t(k_in),
                             i % std::size_t(k_in), n_out, k_in, w[i]);
  QuantizedRows q;
  q.type = type;
  q.n_out = n_out;
  q.k_in = k_in;
  const int blocks = q.blocks_per_row();
  q.codes.assign(type == QuantType::kQ8 ? n : n / 2, type == QuantType::kQ8 ? 0 : 0x88);
  q.scales.assign(static_cast<std::size_t>(n_out) * static_cast<std::size_t>(blocks), 0);
  for (int r = 0; r < n_out; ++r) {
    for (int b = 0; b < blocks; ++b) {
      const std::size_t at = static_cast<std::size_t>(r) * std::size_t(k_in) + std::size_t(b) * kQuantBlock;
      const float* x = w + at;
      float step;
      if (type == QuantType::kQ8) {
        // Symmetric: the largest magnitude maps to ±127, and -128 is never used, so that |q|
        // fits the unsigned operand of the kernels' multiply-adds.
        float m = 0.0f;
        for (int j = 0; j < kQuantBlock; ++j) m = std::fabs(x[j]) > m ? std::fabs(x[j]) : m;
        step = m / 127.0f;
      } else {
        // The smallest step at which every code fits [-8, 7] without clamping: the negative side
        // has 8 steps, the positive side 7 (docs/quantization.md). Never negative, so that a
        // scale carries no sign.
        float lo = 0.0f, hi = 0.0f;
        for (int j = 0; j < kQuantBlock; ++j) {
          lo = x[j] < lo ? x[j] : lo;
          hi = x[j] > hi ? x[j] : hi;
        }
        const float a = -lo / 8.0f, c = hi / 7.0f;
        step = a > c ? a : c;
      }
      if (!(step <= kMaxScale))
        detail::throw_argument(call, "row {}, block {} of a ({}, {}) weight: its step {} is beyond "
                               "the largest half scale ({})", r, b, n_out, k_in, step, kMaxScale);
      const std::uint16_t h = float_to_f16(step > 0.0f ? step : 0.0f);
      const float d = f16_to_float(h);
      q.scales[static_cast<std::size_t>(r) * std::size_t(blocks) + std::size_t(b)] = h;
      if (d == 0.0f) continue;  // codes stay 0 (a zero block, or a step below the smallest half)
      const float qmin = type == QuantType::kQ8 ? -127.0f : -8.0f;
      const float qmax = type == QuantType::kQ8 ? 127.0f : 7.0f;
      for (int j = 0; j < kQuantBlock; ++j) {
        // Clamp before rounding: the half step may round down, so w / d may exceed the range.
        float v = x[j] / d;
        v = v < qmin ? qmin : (v > qmax ? qmax : round_even(v));
        const int code = static_cast<int>(v);
        if (type == QuantType::kQ8) {
          q.codes[at + std::size_t(j)] = static_cast<std::uint8_t>(static_cast<std::int8_t>(code));
        } else {
          std::uint8_t& byte = q.codes[at / 2 + std::size_t(j % 16)];
          const auto nib = static_cast<std::uint8_t>(code + 8);
          byte = j < 16 ? static_cast<std::uint8_t>((byte & 0xf0) | nib)
                        : static_cast<std::uint8_t>((byte & 0x0f) | (nib << 4));
        }
      }
    }
  }
  return q;
}

void dequantize_rows(const QuantizedRows& q, float* out) {
  const int blocks = q.blocks_per_row();
  for (int r = 0; r < q.n_out; ++r) {
    for (int k = 0; k < q.k_in; ++k) {
      const std::size_t at = static_cast<std::size_t>(r) * std::size_t(q.k_in) + std::size_t(k);
      const float d = f16_to_float(q.scales[static_cast<std::size_t>(r) * std::size_t(blocks) + std::size_t(k / kQuantBlock)]);
      int code;
      if (q.type == QuantType::kQ8) {
        code = static_cast<std::int8_t>(q.codes[at]);
      } else {
        const int j = k % kQuantBlock;
        const std::uint8_t byte = q.codes[(at - std::size_t(j)) / 2 + std::size_t(j % 16)];
        code = (j < 16 ? byte & 0x0f : byte >> 4) - 8;
      }
      out[at] = d * static_cast<float>(code);  // exact: 11 by at most 8 significant bits
    }
  }
}

void check_quantized(const QuantizedRows& q, const char* what) {
  if (q.n_out < 0 || q.k_in < 0 || q.k_in % kQuantBlock != 0)
    format_fail(what, fmt::format("a ({}, {}) {} weight: k_in must be a multiple of {}", q.n_out,
                                  q.k_in, quant_name(q.type), kQuantBlock));
  const std::size_t n = static_cast<std::size_t>(q.n_out) * static_cast<std::size_t>(q.k_in);
  const std::size_t want_codes = q.type == QuantType::kQ8 ? n : n / 2;
  if (q.codes.size() != want_codes)
    format_fail(what, fmt::format("a ({}, {}) {} weight needs {} bytes of codes, not {}", q.n_out,
                                  q.k_in, quant_name(q.type), want_codes, q.codes.size()));
  const std::size_t want_scales = n / kQuantBlock;
  if (q.scales.size() != want_scales)
    format_fail(what, fmt::format("a ({}, {}) {} weight needs {} scales ({} blocks of {} per row), "
                                  "not {}", q.n_out, q.k_in, quant_name(q.type), want_scales,
                                  q.blocks_per_row(), kQuantBlock, q.scales.size()));
  for (std::size_t i = 0; i < q.scales.size(); ++i) {
    const std::uint16_t h = q.scales[i];
    if ((h & 0x7c00u) == 0x7c00u || ((h & 0x8000u) != 0 && (h & 0x7fffu) != 0))
      format_fail(what, fmt::format("scale {} (row {}, block {}) is {}: scales must be finite and "
                                    "not negative", i, i / std::size_t(q.blocks_per_row()),
                                    i % std::size_t(q.blocks_per_row()), f16_to_float(h)));
  }
  if (q.type == QuantType::kQ8)
    for (std::size_t i = 0; i < q.codes.size(); ++i)
      if (q.codes[i] == 0x80)
        format_fail(what, fmt::format("q8 code {} (row {}, column {}) is -128: codes are in "
                                      "[-127, 127]", i, i / std::size_t(q.k_in), i % std::size_t(q.k_in)));
}

void quantize_activations(const float* X, std::int64_t rows, std::int64_t ldx, int k_in,
                          std::int8_t* qx, float* dx, std::int32_t* xsum) {
  active().quantize_x(X, rows, ldx, k_in, qx, dx, xsum);
}

}  // namespace recur::kernels
