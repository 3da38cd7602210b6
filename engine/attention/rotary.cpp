// sin and cos for rotary embeddings in one fixed sequence of double operations (attention/rotary.h).
#include "attention/rotary.h"

#include <cmath>
#include <cstdint>

namespace recur {
namespace {

// fdlibm's (e_rem_pio2.c, k_sin.c, k_cos.c) constants.
constexpr double kInvPio2 = 6.36619772367581382433e-01;
constexpr double kPio2_1 = 1.57079632673412561417e+00;   // first 33 bits of pi/2
constexpr double kPio2_2 = 6.07710050630396597660e-11;   // next 33 bits
constexpr double kPio2_3 = 2.02226624871116645580e-21;   // next 33 bits
constexpr double kPio2_3t = 8.47842766036889956997e-32;  // pi/2 - (the three above)
constexpr double kS1 = -1.66666666666666324348e-01, kS2 = 8.33333333332248946124e-03,
                 kS3 = -1.98412698298579493134e-04, kS4 = 2.75573137070700676789e-06,
                 kS5 = -2.50507602534068634195e-08, kS6 = 1.58969099521155010221e-10;
constexpr double kC1 = 4.16666666666666019037e-02, kC2 = -1.38888888888741095749e-03,
                 kC3 = 2.48015872894767294178e-05, kC4 = -2.75573143513906633035e-07,
                 kC5 = 2.08757232129817482790e-09, kC6 = -1.13596475577881948265e-11;

}  // namespace

void sincos_fixed(double x, double* sin_out, double* cos_out) {
  // x = n pi/2 + r, |r| <= pi/4 (a hair more from rounding). For n < 2^20, n * kPio2_1 is exact
  // and x - n * kPio2_1 too (Sterbenz); the remaining parts carry pi/2 to 132 bits. Only basic
  // IEEE operations, each rounded once (no contraction in this tree), so the result's bits are
  // the same on any machine.
  const double n = std::floor(x * kInvPio2 + 0.5);
  double r = x - n * kPio2_1;
  r = r - n * kPio2_2;
  r = r - n * kPio2_3;
  r = r - n * kPio2_3t;
  const double z = r * r;
  const double sr = r + (z * r) * (kS1 + z * (kS2 + z * (kS3 + z * (kS4 + z * (kS5 + z * kS6)))));
  const double cr =
      (1.0 - 0.5 * z) + (z * z) * (kC1 + z * (kC2 + z * (kC3 + z * (kC4 + z * (kC5 + z * kC6)))));
  const auto quadrant = static_cast<std::int64_t>(std::fmod(n, 4.0));
  switch (quadrant) {
    case 0: *sin_out = sr; *cos_out = cr; break;
    case 1: *sin_out = cr; *cos_out = -sr; break;
    case 2: *sin_out = -sr; *cos_out = -cr; break;
    default: *sin_out = -cr; *cos_out = sr; break;
  }
}

}  // namespace recur
