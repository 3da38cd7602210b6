#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "model/decoder_impl.h"
#include "model/fla.h"
#include "recur/error.h"
#include "util/check.h"
#include "util/parallel.h"

namespace recur {

namespace model {

void Workspace::allocate(const ModelConfig& c, const Model::Impl& m, int rows) {
  cap = rows;
  if (c.gated_family()) {
    fla::allocate(c, m, *this, rows);
    return;
  }
  const auto n = static_cast<std::size_t>(rows);
  const auto sz = [](int w) { return static_cast<std::size_t>(w); };
  if (c.architecture == Architecture::kBased) {
    // q, k: linear attention's (n, heads * feature_dim) or the window's (n, hidden); fq, fk:
    // BaseConv's u1 and u2 (n, d_inner); o: attention output or conv(u1); g, u: the MLP's gate
    // and value (n, intermediate).
    const int d = c.hidden_size, di = c.conv_expand * c.hidden_size / 2;
    const int qk = std::max(c.key_dim, d);
    for (auto* b : {&x, &h, &a, &v}) b->assign(n * sz(d), 0.0f);
    q.assign(n * sz(qk), 0.0f);
    k.assign(n * sz(qk), 0.0f);
    fq.assign(n * sz(di), 0.0f);
    fk.assign(n * sz(di), 0.0f);
    o.assign(n * sz(std::max(d, di)), 0.0f);
    g.assign(n * sz(c.intermediate_size), 0.0f);
    u.assign(n * sz(c.intermediate_size), 0.0f);
    fk_full.clear();
    v_full.clear();
    map_scratch.clear();
    logits.clear();
    return;
  }
  const int H = c.num_heads, Hkv = c.num_kv_heads, D = c.d_feature, dv = c.head_v_dim;
  x.assign(n * sz(c.hidden_size), 0.0f);
  h.assign(n * sz(c.hidden_size), 0.0f);
  a.assign(n * sz(c.hidden_size), 0.0f);
  q.assign(n * sz(c.key_dim), 0.0f);
  k.assign(n * sz(c.key_dim / c.kv_groups), 0.0f);
  v.assign(n * sz(c.value_dim / c.kv_groups), 0.0f);
  fq.assign(n * sz(H * D), 0.0f);
  fk.assign(n * sz(Hkv * D), 0.0f);
  o.assign(n * sz(c.value_dim), 0.0f);
  if (c.kv_groups > 1) {
    fk_full.assign(n * sz(H * D), 0.0f);
    v_full.assign(n * sz(H * dv), 0.0f);
  }
  g.assign(n * sz(c.intermediate_size), 0.0f);
  if (c.architecture == Architecture::kLinearAttn) u.assign(n * sz(c.intermediate_size), 0.0f);
  std::size_t scratch = 0;
  for (const auto& l : m.layers)
    scratch = std::max({scratch, l.phi_q->scratch_floats(std::int64_t(rows) * H, c.head_k_dim),
                        l.phi_k->scratch_floats(std::int64_t(rows) * Hkv, c.head_k_dim)});
  map_scratch.assign(scratch, 0.0f);
  logits.clear();
}

std::size_t Workspace::bytes() const {
  std::size_t n = 0;
  for (const auto* b : {&x, &h, &q, &k, &v, &fq, &fk, &fk_full, &v_full, &o, &a, &g, &u,
                        &map_scratch, &logits, &gk, &alpha, &mixer_scratch})
    n += b->capacity() * sizeof(float);
  return n;
}

LayerState LayerState::make(const Model::Impl::Layer& layer) {
  LayerState s;
  switch (layer.mixer) {
    case MixerKind::kLinearAttention: s.linear.emplace(layer.attention->make_state()); break;
    case MixerKind::kShortConv: s.conv.emplace(layer.conv->make_state()); break;
    case MixerKind::kWindowAttention: s.window.emplace(layer.window->make_state()); break;
    case MixerKind::kGated:
      s.gated.emplace(layer.gated->make_state());
      for (const auto* c : {&layer.conv_q, &layer.conv_k, &layer.conv_v})
        if (*c) s.convs.push_back((*c)->make_state());
      break;
    case MixerKind::kAttention: s.causal.emplace(layer.causal->make_state()); break;
  }
  return s;
}

LayerState LayerState::clone() const {
  LayerState s;
  if (linear) s.linear.emplace(linear->clone());
  if (conv) s.conv.emplace(conv->clone());
  if (window) s.window.emplace(window->clone());
  if (gated) s.gated.emplace(gated->clone());
  for (const auto& c : convs) s.convs.push_back(c.clone());
  if (causal) s.causal.emplace(causal->clone());
  return s;
}

void LayerState::reset() {
  if (linear) linear->reset();
  if (conv) conv->reset();
  if (window) window->reset();
  if (gated) gated->reset();
  for (auto& c : convs) c.reset();
  if (causal) causal->reset();
}

std::int64_t LayerState::n_tokens() const {
  return linear ? linear->n_tokens() : conv ? conv->n_tokens() : window ? window->n_tokens()
         : gated ? gated->n_tokens() : causal->n_tokens();
}

std::size_t LayerState::bytes() const {
  if (gated) {
    std::size_t n = gated->bytes();
    for (const auto& c : convs) n += c.bytes();
    return n;
  }
  return linear ? linear->bytes() : conv ? conv->bytes() : window ? window->bytes() : causal->bytes();
}

std::size_t LayerState::raw_size() const {
  if (gated) {
    std::size_t n = gated->raw_size();
    for (const auto& c : convs) n += c.raw_size();
    return n;
  }
  return linear ? linear->raw_size() : conv ? conv->raw_size() : window ? window->raw_size()
                                                                        : causal->raw_size();
}

std::size_t LayerState::raw_size_at(std::int64_t n_tokens) const {
  return causal ? causal->raw_size_at(n_tokens) : raw_size();
}

std::vector<unsigned char> LayerState::raw_bytes() const {
  if (gated) {
    // The recurrence's sums, then each convolution's past inputs (q, k, v), in that order.
    std::vector<unsigned char> out = gated->raw_bytes();
    for (const auto& c : convs) {
      const auto r = c.raw_bytes();
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  }
  return linear ? linear->raw_bytes() : conv ? conv->raw_bytes() : window ? window->raw_bytes()
                                                                          : causal->raw_bytes();
}

void LayerState::load_raw_bytes(const unsigned char* data, std::size_t size) {
  if (linear) linear->load_raw_bytes(data, size);
  else if (conv) conv->load_raw_bytes(data, size);
  else if (window) window->load_raw_bytes(data, size);
  else if (causal) causal->load_raw_bytes(data, size);
  else {
    if (size != raw_size())
      throw FormatError(fmt::format("[LayerState] {} bytes given, this layer's state has {}", size,
                                    raw_size()));
    // Into copies first, so that a failure leaves this state as it was.
    GatedState g = gated->clone();
    std::size_t at = g.raw_size();
    g.load_raw_bytes(data, at);
    std::vector<ShortConvState> cs;
    for (const auto& c : convs) {
      ShortConvState copy = c.clone();
      copy.load_raw_bytes(data + at, copy.raw_size());
      if (copy.n_tokens() != g.n_tokens())
        throw FormatError(fmt::format("[LayerState] a convolution has seen {} tokens, the "
                                      "recurrence {}", copy.n_tokens(), g.n_tokens()));
      at += copy.raw_size();
      cs.push_back(std::move(copy));
    }
    gated.emplace(std::move(g));
    convs = std::move(cs);
  }
}

MixerIo mixer_io(const ModelConfig& c, const Model::Impl::Layer& layer) {
  if (c.gated_family()) return fla::mixer_io(c, layer);
  if (c.architecture != Architecture::kBased) {
    const int fq = c.num_heads * c.d_feature, v = c.num_heads * c.head_v_dim;
    return {fq, fq, v, 0, 0, v};
  }
  const int d = c.hidden_size;
  switch (layer.mixer) {
    case MixerKind::kShortConv: {
      const int di = c.conv_expand * d / 2;
      return {di, 0, 0, 0, 0, di};
    }
    case MixerKind::kLinearAttention: return {c.key_dim, c.key_dim, d, 0, 0, d};
    case MixerKind::kWindowAttention: break;
    case MixerKind::kGated:
    case MixerKind::kAttention: break;  // fla::mixer_io
  }
  return {d, d, d, 0, 0, d};
}

void run_mixer(const ModelConfig& config, const Model::Impl::Layer& layer, LayerState& state,
               const MixerRows& r, int rows, int threads) {
  if (config.gated_family()) {
    fla::run_mixer(config, layer, state, r, rows, threads);
    return;
  }
  const MixerIo io = mixer_io(config, layer);
  const float *a = r.a, *b = r.b, *c = r.c;
  float* out = r.out;
  using CVec = Eigen::Map<const Eigen::VectorXf>;
  using Vec = Eigen::Map<Eigen::VectorXf>;
  using CMap = Eigen::Map<const RowMatrix>;
  using Map = Eigen::Map<RowMatrix>;
  switch (layer.mixer) {
    case MixerKind::kLinearAttention:
      if (rows == 1) {
        layer.attention->step(*state.linear, CVec(a, io.a), CVec(b, io.b), CVec(c, io.c), Vec(out, io.out));
      } else {
        Map O(out, rows, io.out);
        layer.attention->prefill(*state.linear, CMap(a, rows, io.a), CMap(b, rows, io.b),
                                 CMap(c, rows, io.c), O, PrefillOptions{rows, threads});
      }
      return;
    case MixerKind::kShortConv:
      if (rows == 1) {
        layer.conv->step(*state.conv, CVec(a, io.a), Vec(out, io.out));
      } else {
        layer.conv->prefill(*state.conv, CMap(a, rows, io.a), Map(out, rows, io.out));
      }
      return;
    case MixerKind::kWindowAttention:
      if (rows == 1) {
        layer.window->step(*state.window, CVec(a, io.a), CVec(b, io.b), CVec(c, io.c), Vec(out, io.out));
      } else {
        Map O(out, rows, io.out);
        layer.window->prefill(*state.window, CMap(a, rows, io.a), CMap(b, rows, io.b),
                              CMap(c, rows, io.c), O, PrefillOptions{rows, threads});
      }
      return;
    case MixerKind::kGated:
    case MixerKind::kAttention:
      break;  // fla::run_mixer
  }
}

}  // namespace model

Decoder::Decoder(std::shared_ptr<const Model> model, const DecoderOptions& options)
    : model_(std::move(model)), options_(options), impl_(std::make_unique<Impl>()) {
  constexpr const char* call = "Decoder";
  if (!model_) detail::throw_argument(call, "the model is null");
  detail::check_prefill_options(call, options.chunk, options.threads);
  const auto& m = model_->impl();
  for (const auto& layer : m.layers) impl_->states.push_back(model::LayerState::make(layer));
  impl_->logits = Eigen::VectorXf::Zero(model_->config().vocab_size);
  impl_->work.allocate(model_->config(), m, options.chunk);
}

Decoder::Decoder(std::shared_ptr<const Model> model, const DecoderOptions& options,
                 std::unique_ptr<Impl> impl)
    : model_(std::move(model)), options_(options), impl_(std::move(impl)) {}

Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

Decoder Decoder::clone() const {
  auto impl = std::make_unique<Impl>();
  for (const auto& s : impl_->states) impl->states.push_back(s.clone());
  impl->n_tokens = impl_->n_tokens;
  impl->has_logits = impl_->has_logits;
  impl->logits = impl_->logits;
  impl->broken = impl_->broken;
  impl->work.allocate(model_->config(), model_->impl(), options_.chunk);
  return Decoder(model_, options_, std::move(impl));
}

void Decoder::check_usable(const char* call) const {
  if (!impl_->broken.empty())
    detail::throw_argument(call, "an earlier call failed inside the model ({}); call reset() or "
                                 "load() first", impl_->broken);
}

void Decoder::reset() {
  impl_->broken.clear();
  for (auto& s : impl_->states) s.reset();
  impl_->n_tokens = 0;
  impl_->has_logits = false;
  impl_->logits.setZero();
}

void Decoder::set_options(const DecoderOptions& options) {
  detail::check_prefill_options("Decoder::set_options", options.chunk, options.threads);
  if (options.chunk != impl_->work.cap)
    impl_->work.allocate(model_->config(), model_->impl(), options.chunk);
  options_ = options;
}

std::int64_t Decoder::n_tokens() const { return impl_->n_tokens; }

const std::string& Decoder::failure() const { return impl_->broken; }

std::size_t Decoder::state_bytes(MixerKind kind) const {
  std::size_t n = 0;
  const auto& layers = model_->impl().layers;
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (layers[i].mixer == kind) n += impl_->states[i].raw_size();
  return n;
}

std::size_t Decoder::state_bytes() const {
  std::size_t n = 0;
  for (const auto& s : impl_->states) n += s.raw_size();
  return n;
}

std::size_t Decoder::bytes() const {
  std::size_t n = sizeof(*this) + sizeof(Impl) + impl_->work.bytes() +
                  static_cast<std::size_t>(impl_->logits.size()) * sizeof(float);
  for (const auto& s : impl_->states) n += s.bytes();
  return n;
}

ConstVectorRef Decoder::logits() const {
  check_usable("Decoder::logits");
  if (!impl_->has_logits)
    detail::throw_argument("Decoder::logits", "no token has been run through the decoder yet");
  return impl_->logits;
}

// Runs n tokens (n <= cap) through every layer. Each step is row-invariant: a token's bytes do
// not depend on n, so prefill in any chunking equals step() token by token.
void Decoder::forward(const int* tokens, int n, int head) {
  try {
    run_layers(tokens, n, head);
  } catch (const Error& e) {
    impl_->broken = e.what();
    throw;
  }
}

namespace model {

// Based's blocks: x += mixer(RMSNorm(x)); x += fc2(value * silu(gate)) of RMSNorm(x). The
// mixer's projections and gate are row functions here; its sequence part is the callback.
static void run_based_stack(const Model& model, Workspace& w, int n, int threads, Attend attend) {
  const ModelConfig& c = model.config();
  const Model::Impl& m = model.impl();
  const int d = c.hidden_size, di = c.conv_expand * c.hidden_size / 2, I = c.intermediate_size;
  const auto rows = std::int64_t(n);
  for (std::size_t li = 0; li < m.layers.size(); ++li) {
    const auto& L = m.layers[li];
    L.attn_norm.apply(w.x.data(), n, d, w.h.data(), d);
    switch (L.mixer) {
      case MixerKind::kGated:
      case MixerKind::kAttention:
        break;  // fla's kinds, never in a Based model
      case MixerKind::kShortConv:
        L.in_u1.apply(w.h.data(), n, d, w.fq.data(), di, threads);
        L.in_u2.apply(w.h.data(), n, d, w.fk.data(), di, threads);
        attend(li, MixerRows{w.fq.data(), nullptr, nullptr, nullptr, nullptr, w.o.data()}, n, threads);
        // silu(conv(u1)) * u2, the swish-gated unit with the convolution as its gate.
        model::swiglu(w.o.data(), w.fk.data(), w.o.data(), rows * di);
        L.out_proj.apply(w.o.data(), n, di, w.a.data(), d, threads);
        break;
      case MixerKind::kLinearAttention:
        L.q.apply(w.h.data(), n, d, w.q.data(), c.key_dim, threads);
        L.k.apply(w.h.data(), n, d, w.k.data(), c.key_dim, threads);
        L.v.apply(w.h.data(), n, d, w.v.data(), d, threads);
        attend(li, MixerRows{w.q.data(), w.k.data(), w.v.data(), nullptr, nullptr, w.o.data()}, n, threads);
        L.out_proj.apply(w.o.data(), n, d, w.a.data(), d, threads);
        break;
      case MixerKind::kWindowAttention:
        L.q.apply(w.h.data(), n, d, w.q.data(), d, threads);
        L.k.apply(w.h.data(), n, d, w.k.data(), d, threads);
        L.v.apply(w.h.data(), n, d, w.v.data(), d, threads);
        attend(li, MixerRows{w.q.data(), w.k.data(), w.v.data(), nullptr, nullptr, w.o.data()}, n, threads);
        L.out_proj.apply(w.o.data(), n, d, w.a.data(), d, threads);
        break;
    }
    model::add_inplace(w.x.data(), w.a.data(), rows * d);
    L.mlp_norm.apply(w.x.data(), n, d, w.h.data(), d);
    L.gate.apply(w.h.data(), n, d, w.g.data(), I, threads);
    L.up.apply(w.h.data(), n, d, w.u.data(), I, threads);
    model::swiglu(w.g.data(), w.u.data(), w.g.data(), rows * I);
    L.down.apply(w.g.data(), n, I, w.a.data(), d, threads);
    model::add_inplace(w.x.data(), w.a.data(), rows * d);
  }
}

void run_stack(const Model& model, Workspace& w, const int* tokens, int n, int threads,
               Attend attend) {
  const ModelConfig& c = model.config();
  const Model::Impl& m = model.impl();
  const int d = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, D = c.d_feature;
  const int dv = c.head_v_dim, G = c.kv_groups, I = c.intermediate_size;
  const int kd = c.key_dim / G, vd = c.value_dim / G;
  const bool fla = c.architecture == Architecture::kLinearAttn;

  for (int t = 0; t < n; ++t)
    std::memcpy(w.x.data() + std::size_t(t) * std::size_t(d),
                m.embeddings.data() + std::size_t(tokens[t]) * std::size_t(d),
                sizeof(float) * std::size_t(d));

  if (c.architecture == Architecture::kBased) {
    run_based_stack(model, w, n, threads, attend);
    return;
  }
  if (c.gated_family()) {
    fla::run_stack(model, w, n, threads, attend);
    return;
  }
  for (std::size_t li = 0; li < m.layers.size(); ++li) {
    const auto& L = m.layers[li];
    // Attention input: the normed residual (pre-norm) or the residual itself (post-norm).
    const float* in = w.x.data();
    if (fla) {
      L.attn_norm.apply(w.x.data(), n, d, w.h.data(), d);
      in = w.h.data();
    }
    L.q.apply(in, n, d, w.q.data(), c.key_dim, threads);
    L.k.apply(in, n, d, w.k.data(), kd, threads);
    L.v.apply(in, n, d, w.v.data(), vd, threads);
    // Feature maps after the head split: rows of head_k_dim become rows of d_feature.
    const int dk = c.head_k_dim;
    L.phi_q->apply_with_scratch(w.q.data(), std::int64_t(n) * H, dk, dk, w.fq.data(), D,
                                w.map_scratch.data());
    L.phi_k->apply_with_scratch(w.k.data(), std::int64_t(n) * Hkv, dk, dk, w.fk.data(), D,
                                w.map_scratch.data());
    const float* kf = w.fk.data();
    const float* vf = w.v.data();
    if (G > 1) {
      // Query head j reads kv head j / G (the library's repeat of each kv head G times).
      for (int t = 0; t < n; ++t)
        for (int j = 0; j < H; ++j) {
          const auto at = [](int row, int width, int col, int size) {
            return std::size_t(row) * std::size_t(width) + std::size_t(col) * std::size_t(size);
          };
          std::memcpy(w.fk_full.data() + at(t, H * D, j, D), w.fk.data() + at(t, Hkv * D, j / G, D),
                      sizeof(float) * std::size_t(D));
          std::memcpy(w.v_full.data() + at(t, H * dv, j, dv), w.v.data() + at(t, vd, j / G, dv),
                      sizeof(float) * std::size_t(dv));
        }
      kf = w.fk_full.data();
      vf = w.v_full.data();
    }
    attend(li, MixerRows{w.fq.data(), kf, vf, nullptr, nullptr, w.o.data()}, n, threads);
    if (L.has_head_norm) L.head_norm.apply(w.o.data(), n, c.value_dim, w.o.data(), c.value_dim, H);
    L.o.apply(w.o.data(), n, c.value_dim, w.a.data(), d, threads);
    model::add_inplace(w.x.data(), w.a.data(), std::int64_t(n) * d);
    if (fla) {
      L.mlp_norm.apply(w.x.data(), n, d, w.h.data(), d);
      L.gate.apply(w.h.data(), n, d, w.g.data(), I, threads);
      L.up.apply(w.h.data(), n, d, w.u.data(), I, threads);
      model::swiglu(w.g.data(), w.u.data(), w.g.data(), std::int64_t(n) * I);
      L.down.apply(w.g.data(), n, I, w.a.data(), d, threads);
      model::add_inplace(w.x.data(), w.a.data(), std::int64_t(n) * d);
    } else {
      L.attn_norm.apply(w.x.data(), n, d, w.x.data(), d);
      L.fc1.apply(w.x.data(), n, d, w.g.data(), I, threads);
      if (L.gelu) model::gelu_inplace(w.g.data(), std::int64_t(n) * I);
      else model::relu_inplace(w.g.data(), std::int64_t(n) * I);
      L.fc2.apply(w.g.data(), n, I, w.a.data(), d, threads);
      model::add_inplace(w.x.data(), w.a.data(), std::int64_t(n) * d);
      L.mlp_norm.apply(w.x.data(), n, d, w.x.data(), d);
    }
  }
}

void run_head(const Model& model, Workspace& w, int first, int n, float* out, int threads,
              const char* call) {
  const Model::Impl& m = model.impl();
  const int d = model.config().hidden_size, V = model.config().vocab_size;
  const int rows = n - first;
  const float* top = w.x.data() + std::size_t(first) * std::size_t(d);
  if (m.has_final_norm) {
    m.final_norm.apply(top, rows, d, w.h.data(), d);
    top = w.h.data();
  }
  m.lm_head.apply(top, rows, d, out, V, threads);
  // The head is the last place an overflow can appear (finite activations times large weights),
  // and nothing after it would notice: logits are checked like every other stage's output.
  if (call) detail::check_finite(call, "the LM head's output (logits)", out, rows, V, V);
}

}  // namespace model

void Decoder::run_layers(const int* tokens, int n, int head) {
  const ModelConfig& c = model_->config();
  const Model::Impl& m = model_->impl();
  Impl& w = *impl_;
  const int threads = detail::resolve_threads(options_.threads);
  model::run_stack(*model_, w.work, tokens, n, threads,
                   [&](std::size_t li, const model::MixerRows& rows, int count, int nthreads) {
    model::run_mixer(c, m.layers[li], w.states[li], rows, count, nthreads);
  });

  w.n_tokens += n;
  if (head == kHeadNone) return;  // a chunk of a prefill whose logits nobody reads
  // The head: every row when the caller wants all logits, else only the last.
  const int V = c.vocab_size;
  if (head == kHeadAll) {
    w.work.logits.resize(std::size_t(n) * std::size_t(V));
    model::run_head(*model_, w.work, 0, n, w.work.logits.data(), threads, "Decoder");
    std::memcpy(w.logits.data(), w.work.logits.data() + std::size_t(n - 1) * std::size_t(V),
                sizeof(float) * std::size_t(V));
  } else {
    model::run_head(*model_, w.work, n - 1, n, w.logits.data(), threads, "Decoder");
  }
  w.has_logits = true;
}

ConstVectorRef Decoder::prefill(const std::vector<int>& tokens, const Progress& progress,
                                const LogitsSink& each) {
  constexpr const char* call = "Decoder::prefill";
  check_usable(call);
  const int V = model_->config().vocab_size;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= V)
      detail::throw_argument(call, "tokens[{}] is {}, expected 0 to vocab_size - 1 = {}", i,
                             tokens[i], V - 1);
  if (tokens.empty() && !impl_->has_logits)
    detail::throw_argument(call, "no tokens given and none run before: there are no logits");
  const auto total = static_cast<std::int64_t>(tokens.size());
  for (std::int64_t b = 0; b < total; b += impl_->work.cap) {
    const int n = static_cast<int>(std::min<std::int64_t>(impl_->work.cap, total - b));
    // Only the last chunk's last row needs the LM head, unless every position's logits are wanted.
    const bool last = b + n == total;
    forward(tokens.data() + b, n, each ? kHeadAll : last ? kHeadLast : kHeadNone);
    if (each)
      for (int t = 0; t < n; ++t)
        each(b + t, impl_->work.logits.data() + std::size_t(t) * std::size_t(V));
    if (progress) progress(b + n, total);
  }
  return impl_->logits;
}

ConstVectorRef Decoder::step(int token) {
  check_usable("Decoder::step");
  const int V = model_->config().vocab_size;
  if (token < 0 || token >= V)
    detail::throw_argument("Decoder::step", "token is {}, expected 0 to vocab_size - 1 = {}",
                           token, V - 1);
  forward(&token, 1, kHeadLast);
  return impl_->logits;
}

}  // namespace recur
