// LFM2's forward pass over rows (docs/lfm2.md): pre-norm blocks x += mixer(operator_norm(x));
// x += mlp(ffn_norm(x)). Each layer has one stage that depends on the sequence: the
// convolution's past inputs, or the attention's KV cache. Everything else (the projections, the
// gates B * x and C * y, the norms) is a function of one row, so no byte depends on the chunking,
// the threads or the instruction set.
#include <algorithm>
#include <cstring>

#include "layers/mlp.h"
#include "layers/sequence.h"
#include "models/lfm2/lfm2_network.h"

namespace recur::models::lfm2 {
namespace {

constexpr int kStageMixer = 0;

struct Rows : model::Scratch {
  // a: a sublayer's output (cap, hidden); g, u: the MLP's (cap, intermediate).
  // Convolution: bcx, in_proj's B | C | x (cap, 3 hidden); bx, then the convolution's output
  // (cap, hidden); y, C times it (cap, hidden).
  std::vector<float> a, g, u, bcx, bx, conv;
  model::GqaRows attn;
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&a, &g, &u, &bcx, &bx, &conv}) + attn.bytes();
  }
};

class Network final : public model::Network {
 public:
  explicit Network(Stack stack) : s_(std::move(stack)) {}

  std::size_t n_layers() const override { return s_.layers.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t layer) const override {
    const Layer& l = s_.layers[layer];
    if (l.attention) return model::make_gqa_state(l.attn);
    return std::make_unique<model::MixerState<ShortConvState>>(l.conv.conv->make_state(),
                                                               MixerKind::kShortConv);
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    auto w = std::make_unique<Rows>();
    w->cap = rows;
    const auto n = std::size_t(rows);
    const auto sized = [&](std::vector<float>& b, std::size_t width) {
      if (b.size() < n * width) b.assign(n * width, 0.0f);
    };
    const auto d = std::size_t(s_.hidden);
    for (auto* b : {&w->x, &w->h, &w->a}) sized(*b, d);
    sized(w->g, std::size_t(s_.intermediate));
    sized(w->u, std::size_t(s_.intermediate));
    for (const auto& l : s_.layers) {
      if (l.attention) {
        w->attn.grow(rows, l.attn);
      } else {
        sized(w->bcx, 3 * d);
        sized(w->bx, d);
        sized(w->conv, d);
      }
    }
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const int d = s_.hidden;
    const auto rows = std::int64_t(n);
    for (std::size_t li = 0; li < s_.layers.size(); ++li) {
      const Layer& L = s_.layers[li];
      L.operator_norm.apply(w.x.data(), n, d, w.h.data(), d);
      if (L.attention) {
        model::gqa_project(L.attn, w.h.data(), n, d, w.attn, threads);
        attend(li, kStageMixer, threads);
        model::gqa_output(L.attn, w.attn, n, w.a.data(), d, threads);
      } else {
        const ConvBlock& C = L.conv;
        C.in_proj.apply(w.h.data(), n, d, w.bcx.data(), 3 * d, threads);
        // B * x, per row: the convolution's input.
        for (std::int64_t t = 0; t < rows; ++t) {
          const float* row = w.bcx.data() + std::size_t(t) * 3 * std::size_t(d);
          float* bx = w.bx.data() + std::size_t(t) * std::size_t(d);
          for (int j = 0; j < d; ++j) bx[j] = row[j] * row[2 * d + j];
        }
        attend(li, kStageMixer, threads);
        // C times the convolution's output, per row, into bx (free again).
        for (std::int64_t t = 0; t < rows; ++t) {
          const float* c = w.bcx.data() + std::size_t(t) * 3 * std::size_t(d) + std::size_t(d);
          const float* y = w.conv.data() + std::size_t(t) * std::size_t(d);
          float* out = w.bx.data() + std::size_t(t) * std::size_t(d);
          for (int j = 0; j < d; ++j) out[j] = c[j] * y[j];
        }
        C.out_proj.apply(w.bx.data(), n, d, w.a.data(), d, threads);
      }
      model::add_inplace(w.x.data(), w.a.data(), rows * d);
      model::swiglu_mlp(L.ffn_norm, L.w1, L.w3, L.w2, w.x.data(), w.h.data(), w.g.data(),
                        w.u.data(), w.a.data(), n, d, threads);
    }
  }

  void run_sequence(std::size_t layer, int stage, model::Scratch& scratch,
                    model::LayerState& state, int first, int count, int threads) const override {
    (void)stage;
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = s_.layers[layer];
    if (L.attention) return model::gqa_sequence(L.attn, state, w.attn, first, count, threads);
    convolve(L.conv, model::state_of<ShortConvState>(state), w, first, count);
  }

  void clear_sequence(std::size_t layer, int, model::Scratch& scratch, int first,
                      int count) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = s_.layers[layer];
    if (L.attention) return model::gqa_clear(L.attn, w.attn, first, count);
    const auto width = std::size_t(s_.hidden);
    std::fill(w.conv.data() + std::size_t(first) * width,
              w.conv.data() + std::size_t(first + count) * width, 0.0f);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& L : s_.layers)
      for (const auto* d : {&L.w1, &L.w3, &L.w2, &L.attn.q, &L.attn.k, &L.attn.v, &L.attn.o,
                            &L.conv.in_proj, &L.conv.out_proj})
        bytes += model::dense_bytes(*d);
    return bytes;
  }

 private:
  // The convolution over one sequence's rows of B * x, into conv.
  void convolve(const ConvBlock& C, ShortConvState& st, Rows& w, int first, int count) const {
    const auto at = std::size_t(first) * std::size_t(s_.hidden);
    model::convolve(*C.conv, st, w.bx.data() + at, w.conv.data() + at, count);
  }

  Stack s_;
};

}  // namespace

std::unique_ptr<model::Network> make_network(Stack stack) {
  return std::make_unique<Network>(std::move(stack));
}

}  // namespace recur::models::lfm2
