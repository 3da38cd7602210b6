// Mamba-2's SSD mixer (state-spaces' mamba_ssm Mamba2, transformers' Mamba2Mixer and the mixers
// of Granite 4.0-H, Nemotron-H and Falcon-H1 that copy it): its sizes, its tensors, the layer as
// loaded, its per-sequence state and the three stages a family's layer stack runs.
//
// Per token, with H heads of P channels, N state channels and G groups (docs/mamba2.md):
//   z | xBC | dt_raw = in_proj(h)                       (inner, inner + 2 G N, H)
//   x | B | C = silu(conv(xBC))                          depthwise, causal, d_conv taps
//   dt_h = clamp(softplus(dt_raw_h + dt_bias_h), time_step_limit);  a_h = exp(-exp(A_log_h) dt_h)
//   S_h = a_h S_h + B_g (dt_h x_h)^T;   y_h = S_h^T C_g + D_h x_h   (g = h / (H / G))
//   out = out_proj(rmsnorm_per_group(y * silu(z)) * w)  (or rmsnorm(y) * w * silu(z))
// S_h is (N, P): the gated recurrence of recur/gla_recurrence.h with one decay a_h a head and
// token (kPerHeadToken) and B, C shared by the heads of a group (qk_heads G), so prefill walks the tokens in step's order and gives step's bytes (its kernels keep a
// tile of S in registers across the tokens of a chunk).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/family.h"
#include "layers/dense.h"
#include "model/declared_state.h"
#include "model/network.h"
#include "recur/gla_recurrence.h"
#include "recur/short_conv.h"

namespace recur::model {

class Loader;

/// The sizes and options of one Mamba-2 mixer.
struct SsdSpec {
  int hidden = 0;
  int n_heads = 0, head_dim = 0;  // H, P
  int d_state = 0, n_groups = 1;  // N, G: B and C are shared by the H / G heads of a group
  int d_conv = 4;
  bool proj_bias = false;  // in_proj's bias, and out_proj's unless out_proj_bias says
  std::optional<bool> out_proj_bias;  // Falcon-H1: out_proj's is projectors_bias
  bool conv_bias = true;
  // The gated RMSNorm: over groups of inner / norm_groups channels (mamba_ssm: n_groups), its
  // eps, and whether it norms y before the gate (mamba_ssm's norm_before_gate) or y * silu(z).
  // Without it (Falcon-H1's mamba_rms_norm false) the output is y * silu(z), and no norm.weight.
  bool gated_norm = true;
  int norm_groups = 1;
  bool norm_before_gate = false;
  double norm_eps = 1e-5;
  // time_step_limit: dt clamped to [dt_min, dt_max].
  double dt_min = 0.0, dt_max = std::numeric_limits<double>::infinity();
  // Falcon-H1's mup_vector: in_proj's output times one multiplier per part (z, x, B, C, dt);
  // empty: none.
  std::vector<double> part_multipliers;

  std::int64_t inner() const { return std::int64_t(n_heads) * head_dim; }
  std::int64_t conv_dim() const { return inner() + 2 * std::int64_t(n_groups) * d_state; }
  std::int64_t in_width() const { return inner() + conv_dim() + n_heads; }
  bool out_bias() const { return out_proj_bias.value_or(proj_bias); }
};

/// A Mamba-2 layer's sizes as a family's config gives them: H heads of P, N state channels, G
/// groups, d_conv taps.
struct SsdSizes {
  int n_heads, head_dim, d_state, n_groups, d_conv;
};

/// What every family's Mamba-2 layers share: `sizes` over rows of c.hidden_size, dt clamped to
/// [dt_min, dt_max], and the gated norm with c.norm_eps over each group apart (mamba_ssm's
/// RMSNormGated(group_size = inner / ngroups), and llama.cpp's, for every layout: transformers'
/// Mamba2 norms the whole width; docs/mamba2.md), after the gate. The family sets on it what is
/// its own: the biases, the norm's place, Falcon-H1's options.
SsdSpec ssd_spec(const ModelConfig& c, const SsdSizes& sizes, double dt_min, double dt_max);

/// Checks a spec's sizes (heads a multiple of the groups, the norm's groups dividing the width,
/// widths in range, 0 <= dt_min <= dt_max); FormatError "[ModelConfig] SOURCE: ..." naming them.
void check_ssd_spec(const SsdSpec& s, const std::string& source);

/// time_step_limit (mamba_ssm's dt_limit), [min, max] as config.json gives it (Python writes the
/// infinity as Infinity): into min and max, true when given; FormatError naming the key and the
/// file when it is no pair of numbers.
bool read_dt_limit(Fields& f, const char* key, double& min, double& max);
/// [min, max] as config.json writes it.
std::string dt_limit_text(double min, double max);

/// Bytes of a new sequence's state in one mixer (the convolution's window, the heads' S).
std::size_t ssd_state_bytes(const SsdSpec& s);

/// One mixer as loaded.
struct SsdMixer {
  SsdSpec spec;
  Dense in_proj;                             // (in_width, hidden)
  std::vector<float> in_scale;               // (in_width): part_multipliers per column, or empty
  std::unique_ptr<ShortConvolution> conv;    // over conv_dim channels
  std::vector<float> dt_bias, neg_A, D;      // (H); neg_A = -exp(A_log), in double, rounded once
  std::vector<float> norm_weight;            // (inner), empty without the gated norm
  Norm norm;                                 // RMS over inner / norm_groups, no weight
  Dense out_proj;                            // (hidden, inner)
  std::unique_ptr<GlaRecurrence> scan;      // H heads, d_key N, d_value P, scale 1
};

/// Takes the mixer's tensors under `prefix` ("backbone.layers.3.mixer."): in_proj (and its
/// bias), conv1d's weight (and bias), dt_bias, A_log, D, norm.weight (with the gated norm),
/// out_proj (and its bias).
SsdMixer load_ssd_mixer(Loader& L, const std::string& prefix, const SsdSpec& s);

/// One mixer's state for one sequence: S of every head and the convolution's window, saved in
/// that order (each its own record, which carries its token count).
struct SsdState final : DeclaredState<SsdState> {
  static constexpr std::uint32_t kFormat = 0;  // no frame: the recurrence's record carries one
  static constexpr const char* kCall = "LayerState";
  static constexpr const char* kWhat = "this Mamba-2 layer's state";
  SsdState(GlaState s, ShortConvState window) : S(std::move(s)), conv(std::move(window)) {}
  Copyable<GlaState> S;
  Copyable<ShortConvState> conv;

  template <class Self, class F>
  static void parts(Self& s, F&& f) {
    f("recurrence", s.S);
    f("convolution", s.conv);
  }
  MixerKind kind() const override { return MixerKind::kDecayedRecurrence; }
};

std::unique_ptr<LayerState> make_ssd_state(const SsdMixer& m);

/// A Scratch's buffers for the mixers, sized for the widest (grow()).
struct SsdRows {
  std::vector<float> proj;      // (cap, in_width): z | xBC | dt_raw
  std::vector<float> xbc;       // (cap, conv_dim): after the convolution and SiLU
  std::vector<float> a;         // (cap, H): each head's decay
  std::vector<float> v, y;      // (cap, inner): dt x, the scan's output
  void grow(int rows, const SsdSpec& s);
  std::size_t bytes() const { return buffer_bytes({&proj, &xbc, &a, &v, &y}); }
};

/// The row stage before the sequence: in_proj of n rows of h (stride hidden) into b.proj, times
/// in_scale where the spec has part multipliers.
void ssd_project(const SsdMixer& m, const float* h, int n, SsdRows& b, int threads);
/// The sequence stage over rows [first, first + count) of one sequence: the convolution, dt and
/// the decays, the scan, the D skip, into b.y. Step for one row, prefill for more: the same
/// bytes.
void ssd_sequence(const SsdMixer& m, SsdState& st, SsdRows& b, int first, int count, int threads);
/// The row stage after it: the gated norm and out_proj of n rows into out (stride hidden).
void ssd_output(const SsdMixer& m, SsdRows& b, int n, float* out, int threads);

/// The two row stages with their products taken out, for a family whose other products do not
/// wait for these (Falcon-H1's attention beside the mixer) to run them in one job (apply_all):
/// ssd_project is in_proj (ssd_in_call) then ssd_scale; ssd_output is ssd_gate then out_proj
/// (ssd_out_call). The same bytes either way.
DenseCall ssd_in_call(const SsdMixer& m, const float* h, int n, SsdRows& b);
void ssd_scale(const SsdMixer& m, SsdRows& b, int n, int threads);
void ssd_gate(const SsdMixer& m, SsdRows& b, int n, int threads);
DenseCall ssd_out_call(const SsdMixer& m, SsdRows& b, int n, float* out);
/// Zeroes what ssd_sequence writes for those rows (a sequence that failed in a batch).
void ssd_clear(const SsdMixer& m, SsdRows& b, int first, int count);

std::size_t ssd_weight_bytes(const SsdMixer& m);

}  // namespace recur::model
