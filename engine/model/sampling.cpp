#include "recur/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "kernels/finite.h"
#include "util/check.h"
#include "util/parallel.h"

namespace recur {
namespace {

// Candidates per range, at least, of a pass over the vocabulary split over threads: the
// exponentials of one range take about 0.15 ms, against a microsecond or so for a crossing of the
// pool, and a vocabulary under 65,536 ids stays in one range (docs/performance.md, "Decode's
// profile").
constexpr std::size_t kCandidatesPerRange = 32768;

// The ranges of a pass over n candidates depend on n alone: more of them than threads, so that a
// thread that comes late leaves its share to the others (the results depend on neither).
int ranges(std::size_t n) {
  return static_cast<int>(std::max<std::size_t>(1, n / kCandidatesPerRange));
}

}  // namespace

Sampler::Sampler(const SamplerOptions& options) : options_(options), state_(options.seed) {
  constexpr const char* call = "Sampler";
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature))
    detail::throw_argument(call, "temperature is {}, expected a finite number >= 0", options.temperature);
  if (options.top_k < 0) detail::throw_argument(call, "top_k is {}, expected >= 0", options.top_k);
  if (options.threads < 0) detail::throw_argument(call, "threads is {}, expected >= 0", options.threads);
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f))
    detail::throw_argument(call, "top_p is {}, expected 0 < top_p <= 1", options.top_p);
  if (!(options.repetition_penalty > 0.0f) || !std::isfinite(options.repetition_penalty))
    detail::throw_argument(call, "repetition_penalty is {}, expected a finite number > 0",
                           options.repetition_penalty);
}

TokenMask::TokenMask(std::vector<char> allowed) : allowed_(std::move(allowed)) {
  if (allowed_.size() > static_cast<std::size_t>(INT32_MAX))
    detail::throw_argument("TokenMask", "allowed has {} ids, expected at most {}", allowed_.size(), INT32_MAX);
  count_ = static_cast<int>(std::count_if(allowed_.begin(), allowed_.end(), [](char a) { return a != 0; }));
  if (count_ == 0)
    detail::throw_argument("TokenMask", "allowed has {} ids and allows none of them", allowed_.size());
}

double Sampler::uniform() {
  // splitmix64, 53 bits.
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int Sampler::sample(ConstVectorRef logits, const std::vector<int>& history) {
  const int id = draw(logits, history);
  if (constraint_) constraint_->accept(id);
  return id;
}

int Sampler::draw(ConstVectorRef logits, const std::vector<int>& history) {
  constexpr const char* call = "Sampler::sample";
  const auto V = static_cast<int>(logits.size());
  if (V == 0) detail::throw_shape(call, "logits are empty");
  detail::check_finite(call, "logits", logits.data(), 1, V, V);
  // Masked ids are not candidates at all (a logit of -inf): the rest is sampled as if they were
  // not there (their softmax, their top-k and top-p).
  const TokenMask* mask = options_.mask.get();
  order_.clear();
  if (constraint_) {
    const std::vector<char>& allowed = constraint_->allowed(V);
    const int n = std::min(V, static_cast<int>(allowed.size()));
    for (int id = 0; id < n; ++id)
      if (allowed[static_cast<std::size_t>(id)] && (!mask || mask->allows(id))) order_.push_back(id);
    if (order_.empty())
      detail::throw_argument(call, "the constraint and the mask together allow none of the {} ids of the logits", V);
  } else {
    for (int id = 0; id < V; ++id)
      if (!mask || mask->allows(id)) order_.push_back(id);
  }
  if (order_.empty())
    detail::throw_argument(call, "the mask allows none of the {} ids of the logits (it has {} ids)", V,
                           mask->size());
  work_.assign(logits.data(), logits.data() + V);
  if (options_.repetition_penalty != 1.0f) {
    std::unordered_set<int> seen;
    for (int t : history) {
      if (t < 0 || t >= V || !seen.insert(t).second) continue;
      float& l = work_[static_cast<std::size_t>(t)];
      l = l > 0.0f ? l / options_.repetition_penalty : l * options_.repetition_penalty;
    }
  }
  const auto logit = [&](int id) { return work_[static_cast<std::size_t>(id)]; };
  if (options_.temperature == 0.0f) return order_[first_best(order_.size())];

  const double t = static_cast<double>(options_.temperature);
  // Candidates by descending logit (ties: lower id first): a strict order, so a partial sort's
  // first rows are the full sort's.
  const auto by_logit = [&](int a, int b) {
    const float la = logit(a), lb = logit(b);
    return la != lb ? la > lb : a < b;
  };
  p_.resize(work_.size());
  if (options_.top_k > 0 && static_cast<std::size_t>(options_.top_k) < order_.size()) {
    // top-k: the k best, sorted; their softmax, top-p and the draw in that order.
    const auto keep = static_cast<std::size_t>(options_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep), order_.end(), by_logit);
    return draw_ranked(keep, numerators(keep, t, static_cast<double>(logit(order_[0])) / t));
  }
  // Every candidate kept (top_k 0, recur serve's OpenAI default): the softmax in id order, with no
  // sort of the whole vocabulary (at 248,320 ids a sort costs more than the model's step).
  const float best = logit(order_[first_best(order_.size())]);
  const double sum = numerators(order_.size(), t, static_cast<double>(best) / t);
  // top_p 1: the draw walks the ids in their order. Otherwise top-p needs the most likely first,
  // sorted only as far as their mass needs: a first block, then blocks four times larger, each
  // put in place by nth_element and sorted (the same ids in the same order as a full sort's
  // first rows).
  if (options_.top_p >= 1.0f) return draw_ranked(order_.size(), sum);
  double mass = 0.0;
  std::size_t sorted = 0;
  for (std::size_t block = 256; sorted < order_.size() && mass < static_cast<double>(options_.top_p); block *= 4) {
    // A block past half the candidates: the rest sorted at once (nth_element would not pay).
    std::size_t upto = std::min(order_.size(), sorted + block);
    if (2 * upto > order_.size()) upto = order_.size();
    const auto first = order_.begin() + static_cast<std::ptrdiff_t>(sorted);
    const auto last = order_.begin() + static_cast<std::ptrdiff_t>(upto);
    if (upto < order_.size()) std::nth_element(first, last, order_.end(), by_logit);
    std::sort(first, last, by_logit);
    for (; sorted < upto; ++sorted) mass += p_[static_cast<std::size_t>(order_[sorted])] / sum;
  }
  return draw_ranked(sorted, sum);
}

std::size_t Sampler::first_best(std::size_t n) {
  // Each range's first best, then the first best of those in range order: the candidate one pass
  // in order finds (ascending ids: a tie keeps the lower), however the ranges are cut.
  const auto logit = [&](std::size_t i) { return work_[static_cast<std::size_t>(order_[i])]; };
  const int r = ranges(n), threads = detail::resolve_threads(options_.threads);
  best_.resize(static_cast<std::size_t>(r));
  detail::parallel_ranges(static_cast<int>(n), r, threads, [&](int begin, int end, int range) {
    auto best = static_cast<std::size_t>(begin);
    for (auto i = best + 1; i < static_cast<std::size_t>(end); ++i)
      if (logit(i) > logit(best)) best = i;
    best_[static_cast<std::size_t>(range)] = best;
  });
  std::size_t best = best_[0];
  for (const std::size_t b : best_)
    if (logit(b) > logit(best)) best = b;
  return best;
}

double Sampler::numerators(std::size_t n, double t, double top) {
  // The softmax's numerators in float64, each its own and set by id (only the candidates'), on
  // the threads; their sum after, on this thread, in the candidates' order.
  const int threads = detail::resolve_threads(options_.threads);
  detail::parallel_ranges(static_cast<int>(n), ranges(n), threads, [&](int begin, int end, int) {
    for (int i = begin; i < end; ++i) {
      const auto id = static_cast<std::size_t>(order_[static_cast<std::size_t>(i)]);
      p_[id] = std::exp(static_cast<double>(work_[id]) / t - top);
    }
  });
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += p_[static_cast<std::size_t>(order_[i])];
  return sum;
}

int Sampler::draw_ranked(std::size_t keep, double sum) {
  // top-p: the shortest prefix of the first `keep` candidates (most likely first) whose mass
  // reaches top_p, always at least one; then the draw over it in that order.
  const auto p = [&](std::size_t i) { return p_[static_cast<std::size_t>(order_[i])]; };
  std::size_t n = keep;
  if (options_.top_p < 1.0f) {
    double mass = 0.0;
    for (std::size_t i = 0; i < keep; ++i) {
      mass += p(i) / sum;
      if (mass >= static_cast<double>(options_.top_p)) {
        n = i + 1;
        break;
      }
    }
  }
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) total += p(i);
  double r = uniform() * total;
  for (std::size_t i = 0; i < n; ++i) {
    r -= p(i);
    if (r < 0.0) return order_[i];
  }
  return order_[n - 1];
}

std::vector<int> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  ids.reserve(text.size());
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::decode(int token) const {
  if (token < 0 || token >= kVocab) return {};
  return std::string(1, static_cast<char>(token));
}

std::string ByteTokenizer::decode(const std::vector<int>& tokens) const {
  std::string s;
  for (int t : tokens) s += decode(t);
  return s;
}

double log_normalizer(const float* logits, int vocab, const TokenMask* mask) {
  double m = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < vocab; ++i)
    if (!mask || mask->allows(i)) m = std::max(m, static_cast<double>(logits[i]));
  if (m == -std::numeric_limits<double>::infinity())
    detail::throw_argument("log_normalizer", "the mask allows none of the {} ids of the logits", vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i)
    if (!mask || mask->allows(i)) sum += std::exp(static_cast<double>(logits[i]) - m);
  return m + std::log(sum);
}

double log_probability(const float* logits, int vocab, int target) {
  double m = static_cast<double>(logits[0]);
  for (int i = 1; i < vocab; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - m);
  return static_cast<double>(logits[target]) - m - std::log(sum);
}

}  // namespace recur
