// Batched decoding: the tokens of many sequences through the shared layer stack in one pass.
// Rows are laid out item after item; every stage but attention is a function of one row, and
// attention runs per item on that sequence's own state (step for one row, prefill for more).
#include <cstring>
#include <exception>
#include <unordered_set>

#include "model/decoder_impl.h"
#include "recur/error.h"
#include "kernels/finite.h"
#include "util/check.h"
#include "util/parallel.h"

namespace recur {

struct BatchDecoder::Impl {
  std::unique_ptr<model::Scratch> work;  // one row per token
  std::vector<int> tokens;          // the rows' tokens, item after item
  std::vector<int> first_row;       // per item, and one past the last row at the end
  std::vector<std::string> failed;  // per item: why its sequence failed in this call
  std::vector<Item> items;          // step()'s items
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
  return sizeof(*this) + sizeof(Impl) + (impl_->work ? impl_->work->bytes() : 0) +
         sizeof(int) * (impl_->tokens.capacity() + impl_->first_row.capacity()) +
         sizeof(Item) * impl_->items.capacity();
}

int BatchDecoder::step(const std::vector<Decoder*>& decoders, const std::vector<int>& tokens) {
  if (tokens.size() != decoders.size())
    detail::throw_argument("BatchDecoder::step", "{} decoders and {} tokens, expected one token per decoder",
                           decoders.size(), tokens.size());
  auto& items = impl_->items;
  items.resize(decoders.size());
  for (std::size_t i = 0; i < decoders.size(); ++i) items[i] = {decoders[i], &tokens[i], 1};
  return run(items);
}

int BatchDecoder::run(const std::vector<Item>& items) {
  constexpr const char* call = "BatchDecoder::run";
  const std::size_t B = items.size();
  if (B == 0) return 0;
  const int V = model_->config().vocab_size;
  constexpr std::int64_t kMaxRows = std::int64_t(1) << 20;
  std::int64_t rows = 0;
  for (std::size_t i = 0; i < B; ++i) {
    const Item& it = items[i];
    Decoder* d = it.decoder;
    if (!d) detail::throw_argument(call, "items[{}].decoder is null", i);
    if (&d->model() != model_.get())
      detail::throw_argument(call, "items[{}].decoder runs another model than this batch decoder", i);
    if (!d->impl_->broken.empty())
      detail::throw_argument(call, "items[{}].decoder failed in an earlier call ({}); reset() or load() it "
                                   "first", i, d->impl_->broken);
    if (it.count < 1 || !it.tokens)
      detail::throw_argument(call, "items[{}] has {} tokens, expected at least 1", i, it.count);
    rows += it.count;
    if (rows > kMaxRows) detail::throw_argument(call, "more than {} tokens in one call", kMaxRows);
    for (int t = 0; t < it.count; ++t)
      if (it.tokens[t] < 0 || it.tokens[t] >= V)
        detail::throw_argument(call, "items[{}].tokens[{}] is {}, expected 0 to vocab_size - 1 = {}", i, t,
                               it.tokens[t], V - 1);
  }
  // Distinctness without allocating in the common case: a small batch compares pairs.
  if (B <= 64) {
    for (std::size_t i = 0; i < B; ++i)
      for (std::size_t j = i + 1; j < B; ++j)
        if (items[i].decoder == items[j].decoder)
          detail::throw_argument(call, "items[{}] and items[{}] have the same decoder", i, j);
  } else {
    std::unordered_set<const Decoder*> seen;
    for (std::size_t i = 0; i < B; ++i)
      if (!seen.insert(items[i].decoder).second)
        detail::throw_argument(call, "items[{}].decoder appears twice in the batch", i);
  }

  Impl& w = *impl_;
  const int n = static_cast<int>(rows);
  const model::Network& net = *model::impl_of(*model_).network;
  if (!w.work || w.work->cap < n) w.work = net.make_scratch(n);
  w.tokens.resize(std::size_t(n));
  w.first_row.resize(B + 1);
  if (w.failed.size() < B) w.failed.resize(B);
  int row = 0;
  for (std::size_t i = 0; i < B; ++i) {
    w.first_row[i] = row;
    std::memcpy(w.tokens.data() + row, items[i].tokens, sizeof(int) * std::size_t(items[i].count));
    row += items[i].count;
    w.failed[i].clear();
  }
  w.first_row[B] = row;

  const ModelConfig& c = model_->config();
  const int threads = detail::resolve_threads(threads_);
  model::run_stack(*model_, *w.work, w.tokens.data(), n, threads,
                   [&](std::size_t li, int stage, int nthreads) {
    const auto attend = [&](std::size_t i, int prefill_threads) {
      if (!w.failed[i].empty()) return;  // this sequence's rows mean nothing now
      const int r0 = w.first_row[i], count = items[i].count;
      model::LayerState& state = *items[i].decoder->impl_->states[li];
      try {
        net.run_sequence(li, stage, *w.work, state, r0, count, prefill_threads);
      } catch (const std::exception& e) {
        w.failed[i] = e.what();
        net.clear_sequence(li, stage, *w.work, r0, count);
      }
    };
    // Prefill items one after another, each on every thread; then the one-token items split
    // over the threads. Each touches only its own sequence's state.
    int singles = 0;
    for (std::size_t i = 0; i < B; ++i) {
      if (items[i].count > 1) attend(i, nthreads);
      else ++singles;
    }
    if (singles == 0) return;
    detail::parallel_ranges(int(B), std::max(1, std::min(nthreads, singles)), [&](int begin, int end, int) {
      for (int i = begin; i < end; ++i)
        if (items[std::size_t(i)].count == 1) attend(std::size_t(i), 1);
    });
  });

  // Each item's last row, gathered to the front (row i, never past its source), then the head
  // over those rows at once, each row checked on its own: one sequence's overflow is that
  // sequence's failure alone.
  const auto d = std::size_t(c.hidden_size);
  for (std::size_t i = 0; i < B; ++i) {
    const auto last = std::size_t(w.first_row[i + 1] - 1);
    if (last != i) std::memmove(w.work->x.data() + i * d, w.work->x.data() + last * d, sizeof(float) * d);
  }
  const auto V_rows = std::size_t(V);
  w.work->logits.resize(B * V_rows);
  model::run_head(*model_, *w.work, 0, int(B), w.work->logits.data(), threads, nullptr);
  int n_failed = 0;
  for (std::size_t i = 0; i < B; ++i) {
    Decoder::Impl& dec = *items[i].decoder->impl_;
    auto& why = w.failed[i];
    const float* logits = w.work->logits.data() + i * V_rows;
    if (why.empty()) {
      try {
        detail::check_finite("Decoder", "the LM head's output (logits)", logits, 1, V, V);
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    if (!why.empty()) {
      dec.broken = why;
      ++n_failed;
      continue;
    }
    std::memcpy(dec.logits.data(), logits, sizeof(float) * V_rows);
    dec.n_tokens += items[i].count;
    dec.has_logits = true;
  }
  return n_failed;
}

}  // namespace recur
