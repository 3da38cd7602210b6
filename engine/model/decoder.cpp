#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "model/decoder_impl.h"
#include "recur/error.h"
#include "kernels/finite.h"
#include "util/check.h"
#include "util/parallel.h"

namespace recur {

Decoder::Decoder(std::shared_ptr<const Model> model, const DecoderOptions& options)
    : model_(std::move(model)), options_(options), impl_(std::make_unique<Impl>()) {
  constexpr const char* call = "Decoder";
  if (!model_) detail::throw_argument(call, "the model is null");
  detail::check_prefill_options(call, options.chunk, options.threads);
  const model::Network& net = *model::impl_of(*model_).network;
  for (std::size_t i = 0; i < net.n_layers(); ++i) impl_->states.push_back(net.make_state(i));
  impl_->logits = Eigen::VectorXf::Zero(model_->config().vocab_size);
  impl_->work = net.make_scratch(options.chunk);
}

Decoder::Decoder(std::shared_ptr<const Model> model, const DecoderOptions& options,
                 std::unique_ptr<Impl> impl)
    : model_(std::move(model)), options_(options), impl_(std::move(impl)) {}

Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

Decoder Decoder::clone() const {
  auto impl = std::make_unique<Impl>();
  for (const auto& s : impl_->states) impl->states.push_back(s->clone());
  impl->n_tokens = impl_->n_tokens;
  impl->has_logits = impl_->has_logits;
  impl->logits = impl_->logits;
  impl->broken = impl_->broken;
  impl->work = model::impl_of(*model_).network->make_scratch(options_.chunk);
  return Decoder(model_, options_, std::move(impl));
}

void Decoder::check_usable(const char* call) const {
  if (!impl_->broken.empty())
    detail::throw_argument(call, "an earlier call failed inside the model ({}); call reset() or "
                                 "load() first", impl_->broken);
}

void Decoder::reset() {
  impl_->broken.clear();
  for (auto& s : impl_->states) s->reset();
  impl_->n_tokens = 0;
  impl_->has_logits = false;
  impl_->logits.setZero();
}

void Decoder::set_options(const DecoderOptions& options) {
  detail::check_prefill_options("Decoder::set_options", options.chunk, options.threads);
  if (options.chunk != impl_->work->cap)
    impl_->work = model::impl_of(*model_).network->make_scratch(options.chunk);
  options_ = options;
}

std::int64_t Decoder::n_tokens() const { return impl_->n_tokens; }

const std::string& Decoder::failure() const { return impl_->broken; }

std::size_t Decoder::state_bytes(MixerKind kind) const {
  std::size_t n = 0;
  for (const auto& s : impl_->states)
    if (s->kind() == kind) n += s->raw_size();
  return n;
}

bool Decoder::state_grows() const {
  for (const auto& s : impl_->states)
    if (s->grows()) return true;
  return false;
}

std::size_t Decoder::state_bytes() const {
  std::size_t n = 0;
  for (const auto& s : impl_->states) n += s->raw_size();
  return n;
}

std::size_t Decoder::bytes() const {
  std::size_t n = sizeof(*this) + sizeof(Impl) + impl_->work->bytes() +
                  static_cast<std::size_t>(impl_->logits.size()) * sizeof(float);
  for (const auto& s : impl_->states) n += s->bytes();
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

void run_stack(const Model& model, Scratch& s, const int* tokens, int n, int threads,
               Attend attend) {
  const Model::Impl& m = impl_of(model);
  const auto d = std::size_t(model.config().hidden_size);
  for (int t = 0; t < n; ++t)
    std::memcpy(s.x.data() + std::size_t(t) * d, m.embeddings.data() + std::size_t(tokens[t]) * d,
                sizeof(float) * d);
  m.network->run(s, n, threads, attend);
}

void run_head(const Model& model, Scratch& w, int first, int n, float* out, int threads,
              const char* call) {
  const Model::Impl& m = impl_of(model);
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
  const model::Network& net = *model::impl_of(*model_).network;
  Impl& w = *impl_;
  const int threads = detail::resolve_threads(options_.threads);
  model::run_stack(*model_, *w.work, tokens, n, threads,
                   [&](std::size_t li, int stage, int nthreads) {
    net.run_sequence(li, stage, *w.work, *w.states[li], 0, n, nthreads);
  });

  w.n_tokens += n;
  if (head == kHeadNone) return;  // a chunk of a prefill whose logits nobody reads
  // The head: every row when the caller wants all logits, else only the last.
  const int V = c.vocab_size;
  if (head == kHeadAll) {
    w.work->logits.resize(std::size_t(n) * std::size_t(V));
    model::run_head(*model_, *w.work, 0, n, w.work->logits.data(), threads, "Decoder");
    std::memcpy(w.logits.data(), w.work->logits.data() + std::size_t(n - 1) * std::size_t(V),
                sizeof(float) * std::size_t(V));
  } else {
    model::run_head(*model_, *w.work, n - 1, n, w.logits.data(), threads, "Decoder");
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
  for (std::int64_t b = 0; b < total; b += impl_->work->cap) {
    const int n = static_cast<int>(std::min<std::int64_t>(impl_->work->cap, total - b));
    // Only the last chunk's last row needs the LM head, unless every position's logits are wanted.
    const bool last = b + n == total;
    forward(tokens.data() + b, n, each ? kHeadAll : last ? kHeadLast : kHeadNone);
    if (each)
      for (int t = 0; t < n; ++t)
        each(b + t, impl_->work->logits.data() + std::size_t(t) * std::size_t(V));
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
