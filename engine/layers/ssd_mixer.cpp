// Mamba-2's SSD mixer: tensors, loading, state and stages (ssd_mixer.h; docs/mamba2.md).
#include "layers/ssd_mixer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "layers/sequence.h"
#include "model/config_fields.h"
#include "model/loader.h"
#include "recur/error.h"
#include "util/parallel.h"

namespace recur::model {
namespace {

using CMap = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using Map = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

// torch's softplus (beta 1, threshold 20), in double.
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

std::size_t sz(std::int64_t n) { return std::size_t(n); }

}  // namespace

SsdSpec ssd_spec(const ModelConfig& c, const SsdSizes& sizes, double dt_min, double dt_max) {
  SsdSpec s;
  s.hidden = c.hidden_size;
  s.n_heads = sizes.n_heads;
  s.head_dim = sizes.head_dim;
  s.d_state = sizes.d_state;
  s.n_groups = sizes.n_groups;
  s.d_conv = sizes.d_conv;
  s.norm_groups = sizes.n_groups;
  s.norm_eps = c.norm_eps;
  s.dt_min = dt_min;
  s.dt_max = dt_max;
  return s;
}

void check_ssd_spec(const SsdSpec& s, const std::string& source) {
  if (s.n_heads < 1 || s.head_dim < 1 || s.d_state < 1 || s.n_groups < 1 || s.d_conv < 1 ||
      s.norm_groups < 1)
    config_fail(source, "the Mamba-2 sizes (heads {}, head_dim {}, d_state {}, n_groups {}, "
                        "d_conv {}, norm groups {}) must be positive", s.n_heads, s.head_dim,
                s.d_state, s.n_groups, s.d_conv, s.norm_groups);
  if (s.n_heads % s.n_groups != 0)
    config_fail(source, "{} Mamba-2 heads are not a multiple of n_groups {}: B and C are shared "
                        "by the heads of a group", s.n_heads, s.n_groups);
  if (s.inner() > kMaxDim || s.in_width() > kMaxDim ||
      std::int64_t(s.n_heads) * s.d_state > kMaxDim)
    config_fail(source, "the Mamba-2 widths ({} heads of {}, d_state {}, n_groups {}) are out of "
                        "range", s.n_heads, s.head_dim, s.d_state, s.n_groups);
  if (s.inner() % s.norm_groups != 0)
    config_fail(source, "the gated norm's {} groups do not divide the mixer's width {}",
                s.norm_groups, s.inner());
  if (!(s.dt_min >= 0.0 && s.dt_min <= s.dt_max))
    config_fail(source, "time_step_limit is [{}, {}]: expected 0 <= min <= max", s.dt_min,
                s.dt_max);
  if (!s.part_multipliers.empty() && s.part_multipliers.size() != 5)
    config_fail(source, "{} Mamba-2 part multipliers, expected 5 (z, x, B, C, dt)",
                s.part_multipliers.size());
  for (const double m : s.part_multipliers)
    if (!std::isfinite(m))
      config_fail(source, "a Mamba-2 part multiplier is {}, expected a finite number", m);
  if (!(s.norm_eps >= 0.0 && s.norm_eps <= 1.0))
    config_fail(source, "the gated norm's eps is {}, expected 0 to 1", s.norm_eps);
}

bool read_dt_limit(Fields& f, const char* key, double& min, double& max) {
  const json::Value* v = f.get(key);
  if (!v) return false;
  if (!v->is_array() || v->array().size() != 2 || !v->array()[0].is_number() ||
      !v->array()[1].is_number())
    config_fail(f.source(), "{} is {}, expected [min, max]", f.name(key), describe_json(*v));
  min = v->array()[0].number();
  max = v->array()[1].number();
  return true;
}

std::string dt_limit_text(double min, double max) {
  return fmt::format("[{}, {}]", config_number(min),
                     std::isinf(max) ? std::string("Infinity") : config_number(max));
}

std::size_t ssd_state_bytes(const SsdSpec& s) {
  return sz(std::int64_t(s.n_heads) * s.d_state * s.head_dim) * sizeof(float) +
         sz(std::int64_t(s.d_conv - 1) * s.conv_dim()) * sizeof(float);
}

SsdMixer load_ssd_mixer(Loader& L, const std::string& p, const SsdSpec& s) {
  SsdMixer m;
  m.spec = s;
  const int d = s.hidden, H = s.n_heads, C = int(s.conv_dim());
  m.in_proj = dense(L, p + "in_proj", int(s.in_width()), d, s.proj_bias,
                    "2 * heads * head_dim + 2 * n_groups * d_state + heads, hidden_size");
  const auto taps = L.take(p + "conv1d.weight", {C, 1, s.d_conv},
                           "heads * head_dim + 2 * n_groups * d_state, 1, d_conv", Init::kConv);
  Eigen::VectorXf bias;
  if (s.conv_bias) {
    const auto b = L.take(p + "conv1d.bias", {C}, "heads * head_dim + 2 * n_groups * d_state",
                          Init::kBias);
    bias = Eigen::Map<const Eigen::VectorXf>(b.data(), C);
  }
  m.conv = std::make_unique<ShortConvolution>(Eigen::Map<const RowMatrix>(taps.data(), C, s.d_conv),
                                              bias);
  m.dt_bias = L.take(p + "dt_bias", {H}, "heads", Init::kBias);
  for (const float a : L.take(p + "A_log", {H}, "heads", Init::kBias))
    m.neg_A.push_back(float(-std::exp(double(a))));
  m.D = L.take(p + "D", {H}, "heads", Init::kNorm);
  if (s.gated_norm)
    m.norm_weight = L.take(p + "norm.weight", {int(s.inner())}, "heads * head_dim", Init::kNorm);
  m.norm.dim = int(s.inner() / s.norm_groups);
  m.norm.eps = float(s.norm_eps);
  m.out_proj = dense(L, p + "out_proj", d, int(s.inner()), s.out_bias(),
                     "hidden_size, heads * head_dim");
  if (!s.part_multipliers.empty()) {
    // Each part's columns: z (inner), x (inner), B and C (n_groups * d_state each), dt (heads).
    const std::int64_t GN = std::int64_t(s.n_groups) * s.d_state;
    const std::int64_t widths[5] = {s.inner(), s.inner(), GN, GN, H};
    for (int part = 0; part < 5; ++part)
      m.in_scale.insert(m.in_scale.end(), sz(widths[part]), float(s.part_multipliers[sz(part)]));
  }
  GlaRecurrenceConfig g;
  g.n_heads = H;
  g.d_key = s.d_state;
  g.d_value = s.head_dim;
  g.decay = DecayKind::kPerHeadToken;
  g.qk_heads = s.n_groups;  // B and C: one per group
  g.scale = 1.0f;
  m.scan = std::make_unique<GlaRecurrence>(g);
  return m;
}

std::unique_ptr<LayerState> make_ssd_state(const SsdMixer& m) {
  return std::make_unique<SsdState>(m.scan->make_state(), m.conv->make_state());
}

void SsdRows::grow(int rows, const SsdSpec& s) {
  const auto n = std::size_t(rows);
  const auto sized = [&](std::vector<float>& b, std::int64_t width) {
    if (b.size() < n * sz(width)) b.assign(n * sz(width), 0.0f);
  };
  sized(proj, s.in_width());
  sized(xbc, s.conv_dim());
  sized(a, s.n_heads);
  sized(v, s.inner());
  sized(y, s.inner());
}

namespace {

// Runs fn(t) for each row t of [first, first + count), the rows shared by up to `threads`
// threads (detail::parallel_rows): the stages that work on one row at a time.
template <class Fn>
void per_row(int first, int count, int threads, const Fn& fn) {
  detail::parallel_rows(count, threads, [&](int r0, int r1) {
    for (int t = first + r0; t < first + r1; ++t) fn(t);
  });
}

// xbc rows = conv(the xBC columns of the proj rows), with the sequence's window (SiLU follows,
// row by row, in row_inputs).
void convolve(const SsdMixer& m, SsdState& st, SsdRows& b, int first, int count) {
  const SsdSpec& s = m.spec;
  const std::int64_t W = s.in_width(), C = s.conv_dim();
  const float* in = b.proj.data() + sz(first) * sz(W) + sz(s.inner());
  float* out = b.xbc.data() + sz(first) * sz(C);
  model::convolve(*m.conv, st.conv, in, out, count, int(W), int(C));
}

// One row after the convolution: its SiLU, then dt per head (softplus, clamp), the head's
// decay a = exp(dt A) (in double, rounded once) and v = dt x. The scan reads B and C (its k and
// q, one per group) where the SiLU leaves them.
void row_inputs(const SsdMixer& m, SsdRows& b, int t) {
  const SsdSpec& s = m.spec;
  const int H = s.n_heads, P = s.head_dim;
  const std::int64_t W = s.in_width(), C = s.conv_dim(), I = s.inner();
  const float* dt_raw = b.proj.data() + sz(t) * sz(W) + sz(I + C);
  float* x = b.xbc.data() + sz(t) * sz(C);
  gates::silu(x, x, C);
  float* a = b.a.data() + sz(t) * sz(H);
  float* v = b.v.data() + sz(t) * sz(I);
  for (int h = 0; h < H; ++h) {
    const double sp = softplus(double(dt_raw[h]) + double(m.dt_bias[sz(h)]));
    const float dt = float(std::min(std::max(sp, s.dt_min), s.dt_max));
    a[h] = float(std::exp(double(dt) * double(m.neg_A[sz(h)])));
    for (int j = 0; j < P; ++j) v[h * P + j] = dt * x[h * P + j];
  }
}

// y += D x, per head, for one row.
void skip_row(const SsdMixer& m, SsdRows& b, int t) {
  const SsdSpec& s = m.spec;
  const int P = s.head_dim;
  const float* x = b.xbc.data() + sz(t) * sz(s.conv_dim());
  float* y = b.y.data() + sz(t) * sz(s.inner());
  for (int h = 0; h < s.n_heads; ++h) {
    const float D = m.D[sz(h)];
    for (int j = h * P; j < (h + 1) * P; ++j) y[j] += D * x[j];
  }
}

// One row of y into out_proj's input, in place: y * silu(z) (z: the row's first inner columns
// of proj), with the gated norm per group and its weight before or after the gate.
void gate_row(const SsdMixer& m, const float* z, float* y) {
  const SsdSpec& s = m.spec;
  const std::int64_t I = s.inner();
  if (!s.gated_norm) return swiglu(z, y, y, I);
  if (!s.norm_before_gate) swiglu(z, y, y, I);
  m.norm.apply(y, 1, I, y, I, s.norm_groups);
  for (std::int64_t j = 0; j < I; ++j) y[j] *= m.norm_weight[sz(j)];
  if (s.norm_before_gate) swiglu(z, y, y, I);
}

}  // namespace

void ssd_sequence(const SsdMixer& m, SsdState& st, SsdRows& b, int first, int count,
                  int threads) {
  const SsdSpec& s = m.spec;
  const std::int64_t I = s.inner(), C = s.conv_dim(), H = s.n_heads;
  const std::int64_t GN = std::int64_t(s.n_groups) * s.d_state;
  // The convolution moves the window on before the scan checks its inputs, and is not undone
  // when the scan refuses them (non-finite numbers): such a failure breaks the decoder
  // (Decoder::forward), whose state is then reset or loaded whole, and the layers before this
  // one have moved on too. Keeping a copy to put back would cost an allocation every token.
  convolve(m, st, b, first, count);
  per_row(first, count, threads, [&](int t) { row_inputs(m, b, t); });
  const auto row = [&](std::vector<float>& v, std::int64_t width) {
    return v.data() + sz(first) * sz(width);
  };
  // One path for one row and many: prefill gives step's bytes at any count and splits the
  // heads over the threads, so a token's walk (each head's S read and written once) is shared
  // by the threads too instead of running on one between the products.
  // q = C and k = B: the last columns of the rows of xbc.
  const float* B = row(b.xbc, C) + I;
  Map Y(row(b.y, I), count, I, Eigen::OuterStride<>(I));
  m.scan->prefill(st.S, CMap(B + GN, count, GN, Eigen::OuterStride<>(C)),
                  CMap(B, count, GN, Eigen::OuterStride<>(C)),
                  CMap(row(b.v, I), count, I, Eigen::OuterStride<>(I)),
                  CMap(row(b.a, H), count, H, Eigen::OuterStride<>(H)), Y,
                  PrefillOptions{count, threads});
  per_row(first, count, threads, [&](int t) { skip_row(m, b, t); });
}

DenseCall ssd_in_call(const SsdMixer& m, const float* h, int n, SsdRows& b) {
  return {&m.in_proj, h, n, m.spec.hidden, b.proj.data(), m.spec.in_width()};
}

void ssd_scale(const SsdMixer& m, SsdRows& b, int n, int threads) {
  if (m.in_scale.empty()) return;
  const std::int64_t W = m.spec.in_width();
  per_row(0, n, threads, [&](int t) {
    float* r = b.proj.data() + sz(t) * sz(W);
    for (std::int64_t j = 0; j < W; ++j) r[j] *= m.in_scale[sz(j)];
  });
}

void ssd_project(const SsdMixer& m, const float* h, int n, SsdRows& b, int threads) {
  m.in_proj.apply(h, n, m.spec.hidden, b.proj.data(), m.spec.in_width(), threads);
  ssd_scale(m, b, n, threads);
}

void ssd_gate(const SsdMixer& m, SsdRows& b, int n, int threads) {
  const std::int64_t I = m.spec.inner(), W = m.spec.in_width();
  per_row(0, n, threads, [&](int t) {
    gate_row(m, b.proj.data() + sz(t) * sz(W), b.y.data() + sz(t) * sz(I));
  });
}

DenseCall ssd_out_call(const SsdMixer& m, SsdRows& b, int n, float* out) {
  return {&m.out_proj, b.y.data(), n, m.spec.inner(), out, m.spec.hidden};
}

void ssd_output(const SsdMixer& m, SsdRows& b, int n, float* out, int threads) {
  ssd_gate(m, b, n, threads);
  m.out_proj.apply(b.y.data(), n, m.spec.inner(), out, m.spec.hidden, threads);
}

void ssd_clear(const SsdMixer& m, SsdRows& b, int first, int count) {
  const std::int64_t I = m.spec.inner();
  std::fill(b.y.data() + sz(first) * sz(I), b.y.data() + sz(first + count) * sz(I), 0.0f);
}

std::size_t ssd_weight_bytes(const SsdMixer& m) {
  return dense_bytes(m.in_proj) + dense_bytes(m.out_proj);
}

}  // namespace recur::model
