// Batched decoding: one token of each of many sequences through the shared layer stack.
#include <cstring>
#include <exception>
#include <unordered_set>

#include "model/decoder_impl.h"
#include "recur/error.h"
#include "util/check.h"
#include "util/parallel.h"

namespace recur {

struct BatchDecoder::Impl {
  model::Workspace work;      // one row per sequence
  std::vector<std::string> failed;  // per row: why its sequence failed in this call
};

BatchDecoder::BatchDecoder(std::shared_ptr<const Model> model, int threads)
    : model_(std::move(model)), impl_(std::make_unique<Impl>()) {
  if (!model_) detail::throw_argument("BatchDecoder", "the model is null");
  set_threads(threads);
}

BatchDecoder::~BatchDecoder() = default;
BatchDecoder::BatchDecoder(BatchDecoder&&) noexcept = default;
BatchDecoder& BatchDecoder::operator=(BatchDecoder&&) noexcept = default;

void BatchDecoder::set_threads(int threads) {
  if (threads < 0)
    detail::throw_argument("BatchDecoder", "threads is {}, expected 0 (all cores) or more", threads);
  threads_ = threads;
}

std::size_t BatchDecoder::bytes() const {
  return sizeof(*this) + sizeof(Impl) + impl_->work.bytes();
}

int BatchDecoder::step(const std::vector<Decoder*>& decoders, const std::vector<int>& tokens) {
  constexpr const char* call = "BatchDecoder::step";
  const std::size_t B = decoders.size();
  if (tokens.size() != B)
    detail::throw_argument(call, "{} decoders and {} tokens, expected one token per decoder", B,
                           tokens.size());
  if (B == 0) return 0;
  if (B > (std::size_t(1) << 20))
    detail::throw_argument(call, "{} decoders, at most {} in one batch", B, std::size_t(1) << 20);
  const int V = model_->config().vocab_size;
  // Distinctness without allocating in the common case: a small batch compares pairs.
  for (std::size_t i = 0; i < B; ++i) {
    Decoder* d = decoders[i];
    if (!d) detail::throw_argument(call, "decoders[{}] is null", i);
    if (&d->model() != model_.get())
      detail::throw_argument(call, "decoders[{}] runs another model than this batch decoder", i);
    if (!d->impl_->broken.empty())
      detail::throw_argument(call, "decoders[{}] failed in an earlier call ({}); reset() or load() it "
                                   "first", i, d->impl_->broken);
    if (tokens[i] < 0 || tokens[i] >= V)
      detail::throw_argument(call, "tokens[{}] is {}, expected 0 to vocab_size - 1 = {}", i,
                             tokens[i], V - 1);
  }
  if (B <= 64) {
    for (std::size_t i = 0; i < B; ++i)
      for (std::size_t j = i + 1; j < B; ++j)
        if (decoders[i] == decoders[j])
          detail::throw_argument(call, "decoders[{}] and decoders[{}] are the same decoder", i, j);
  } else {
    std::unordered_set<const Decoder*> seen;
    for (std::size_t i = 0; i < B; ++i)
      if (!seen.insert(decoders[i]).second)
        detail::throw_argument(call, "decoders[{}] appears twice in the batch", i);
  }

  Impl& w = *impl_;
  const int n = static_cast<int>(B);
  if (w.work.cap < n) w.work.allocate(model_->config(), model_->impl(), n);
  if (w.failed.size() < B) w.failed.resize(B);
  for (std::size_t i = 0; i < B; ++i) w.failed[i].clear();

  const ModelConfig& c = model_->config();
  const Model::Impl& m = model_->impl();
  const int threads = detail::resolve_threads(threads_);
  const int H = c.num_heads, D = c.d_feature, dv = c.head_v_dim;
  const auto fq_row = std::size_t(H) * std::size_t(D), v_row = std::size_t(H) * std::size_t(dv);
  model::run_stack(*model_, w.work, tokens.data(), n, threads,
                   [&](std::size_t li, const float* fq, const float* kf, const float* vf, float* o,
                       int rows, int nthreads) {
    const LinearAttention& attn = *m.layers[li].attention;
    // Each sequence's step touches only its own state: the split over threads changes nothing.
    detail::parallel_ranges(rows, std::min(nthreads, rows), [&](int begin, int end, int) {
      for (int r = begin; r < end; ++r) {
        if (!w.failed[std::size_t(r)].empty()) continue;  // this row's values mean nothing now
        try {
          attn.step(decoders[std::size_t(r)]->impl_->states[li],
                    Eigen::Map<const Eigen::VectorXf>(fq + std::size_t(r) * fq_row, H * D),
                    Eigen::Map<const Eigen::VectorXf>(kf + std::size_t(r) * fq_row, H * D),
                    Eigen::Map<const Eigen::VectorXf>(vf + std::size_t(r) * v_row, H * dv),
                    Eigen::Map<Eigen::VectorXf>(o + std::size_t(r) * v_row, H * dv));
        } catch (const std::exception& e) {
          w.failed[std::size_t(r)] = e.what();
          std::fill(o + std::size_t(r) * v_row, o + std::size_t(r + 1) * v_row, 0.0f);
        }
      }
    });
  });

  // The head over every row at once, then each row checked on its own: one sequence's overflow
  // is that sequence's failure alone.
  const auto V_rows = std::size_t(V);
  w.work.logits.resize(B * V_rows);
  model::run_head(*model_, w.work, 0, n, w.work.logits.data(), threads, nullptr);
  int n_failed = 0;
  for (std::size_t r = 0; r < B; ++r) {
    Decoder::Impl& d = *decoders[r]->impl_;
    auto& why = w.failed[r];
    const float* row = w.work.logits.data() + r * V_rows;
    if (why.empty()) {
      try {
        detail::check_finite("Decoder", "the LM head's output (logits)", row, 1, V, V);
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    if (!why.empty()) {
      d.broken = why;
      ++n_failed;
      continue;
    }
    std::memcpy(d.logits.data(), row, sizeof(float) * V_rows);
    d.n_tokens += 1;
    d.has_logits = true;
  }
  return n_failed;
}

}  // namespace recur
