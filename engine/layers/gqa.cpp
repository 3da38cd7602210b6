// Grouped-query softmax attention layers (gqa.h).
#include "layers/gqa.h"

#include <algorithm>
#include <cstring>

#include "layers/output_gate.h"
#include "layers/sequence.h"
#include "model/loader.h"

namespace recur::model {

GqaLayer load_gqa(Loader& L, const std::string& prefix, int hidden, bool bias,
                  const CausalAttentionConfig& ac) {
  GqaLayer a;
  a.H = ac.n_heads;
  a.Hkv = ac.n_kv_heads > 0 ? ac.n_kv_heads : ac.n_heads;
  a.d = ac.d_head;
  const int hd = a.H * a.d, kv = a.Hkv * a.d;
  a.q = dense(L, prefix + "q_proj", hd, hidden, bias, "num_attention_heads * head_dim, hidden_size");
  a.k = dense(L, prefix + "k_proj", kv, hidden, bias, "num_key_value_heads * head_dim, hidden_size");
  a.v = dense(L, prefix + "v_proj", kv, hidden, bias, "num_key_value_heads * head_dim, hidden_size");
  a.o = dense(L, prefix + "o_proj", hidden, hd, bias, "hidden_size, num_attention_heads * head_dim");
  a.attention = std::make_unique<CausalAttention>(ac);
  return a;
}

std::unique_ptr<LayerState> make_gqa_state(const GqaLayer& a) {
  return std::make_unique<MixerState<CausalState>>(a.attention->make_state(),
                                                   MixerKind::kAttention);
}

void GqaRows::grow(int rows, const GqaLayer& a) {
  const auto n = std::size_t(rows);
  const auto hd = n * std::size_t(a.H) * std::size_t(a.d);
  const auto kv = n * std::size_t(a.Hkv) * std::size_t(a.d);
  for (auto* b : {&q, &o}) if (b->size() < hd) b->assign(hd, 0.0f);
  for (auto* b : {&k, &v}) if (b->size() < kv) b->assign(kv, 0.0f);
  if (!a.output_gate) return;
  if (qg.size() < 2 * hd) qg.assign(2 * hd, 0.0f);
  if (gate.size() < hd) gate.assign(hd, 0.0f);
}

void gqa_project(const GqaLayer& a, const float* h, int n, int hidden, GqaRows& b, int threads) {
  const int hd = a.H * a.d, kv = a.Hkv * a.d;
  // q (with its gate), k and v in one job: each the bytes of its own apply().
  float* q = a.output_gate ? b.qg.data() : b.q.data();
  apply_all({{&a.q, h, n, hidden, q, a.output_gate ? 2 * hd : hd},
             {&a.k, h, n, hidden, b.k.data(), kv},
             {&a.v, h, n, hidden, b.v.data(), kv}},
            threads);
  if (a.output_gate) {
    // Per head, q_proj's d floats of query then d of gate, apart.
    const auto step = std::size_t(a.d);
    for (int t = 0; t < n; ++t)
      for (int head = 0; head < a.H; ++head) {
        const float* src =
            b.qg.data() + std::size_t(t) * std::size_t(2 * hd) + 2 * std::size_t(head) * step;
        const std::size_t at = std::size_t(t) * std::size_t(hd) + std::size_t(head) * step;
        std::memcpy(b.q.data() + at, src, step * sizeof(float));
        std::memcpy(b.gate.data() + at, src + step, step * sizeof(float));
      }
  }
  if (!a.qk_norm) return;
  a.q_norm.apply(b.q.data(), n, hd, b.q.data(), hd, a.H);
  a.k_norm.apply(b.k.data(), n, kv, b.k.data(), kv, a.Hkv);
}

void gqa_sequence(const GqaLayer& a, LayerState& state, GqaRows& b, int first, int count,
                  int threads) {
  const std::size_t r = std::size_t(first), hd = std::size_t(a.H * a.d),
                    kv = std::size_t(a.Hkv * a.d);
  attend(*a.attention, state_of<CausalState>(state), b.q.data() + r * hd, b.k.data() + r * kv,
         b.v.data() + r * kv, b.o.data() + r * hd, count, threads);
}

void gqa_output(const GqaLayer& a, GqaRows& b, int n, float* out, int hidden, int threads) {
  const int hd = a.H * a.d;
  if (a.output_gate) sigmoid_gate(b.o.data(), b.gate.data(), std::int64_t(n) * hd);
  a.o.apply(b.o.data(), n, hd, out, hidden, threads);
}

void gqa_clear(const GqaLayer& a, GqaRows& b, int first, int count) {
  const auto width = std::size_t(a.H) * std::size_t(a.d);
  std::fill(b.o.data() + std::size_t(first) * width, b.o.data() + std::size_t(first + count) * width,
            0.0f);
}

std::size_t gqa_weight_bytes(const GqaLayer& a) {
  std::size_t bytes = 0;
  for (const auto* d : {&a.q, &a.k, &a.v, &a.o}) bytes += dense_bytes(*d);
  return bytes;
}

}  // namespace recur::model
