// The conformance suite: what every model family must do, checked once for every family the
// registry lists, on the small fixtures of tests/conformance/fixtures.cpp (a family without one
// fails the first case). For each fixture: prefill in any chunk size, split and thread count
// gives the bytes of stepping; every instruction set gives the scalar target's bytes; a
// sequence in a batch gets the bytes it gets alone, whatever the others; a saved state continues
// as one run, a clone branches alone; q8 and q4 weights quantize back to their own codes from
// their dequantized values and keep every exactness; bad config fields, missing, misshapen and
// unknown tensors are refused by name; bad input leaves the state as it was. What is a family's
// own (its float64 reference, its published files) stays in its own tests.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "conformance/fixtures.h"
#include "kernels/quant.h"
#include "model/family.h"
#include "model/model_impl.h"
#include "model/random_weights.h"
#include "recur/error.h"
#include "recur/model.h"
#include "recur/quantize.h"
#include "recur/safetensors.h"
#include "support/each_isa.h"
#include "support/temp_dir.h"
#include "util/hash.h"

using namespace recur;
using Catch::Matchers::Contains;
using recur::conformance::Fixture;
using recur::conformance::fixtures;
using recur::testing::TempDir;
using Shape = std::vector<std::int64_t>;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Past one fold of a linear-attention state (256 tokens), so that prefill crosses it mid-chunk.
const int kTokens = kSanitized ? 70 : 300;

ModelConfig config_of(const Fixture& f) { return ModelConfig::from_json(f.config, f.name); }

// The family of the fixture's configuration, as the registry names it.
const model::Family* family_of(const Fixture& f) { return &model::family_of(config_of(f)); }

std::shared_ptr<const Model> random_model(const ModelConfig& c, std::uint64_t seed,
                                          DType dtype = DType::kF32) {
  return Model::from_weights(c, RandomWeights(c, seed, dtype));
}

std::vector<int> tokens(int n, int vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<int> out(static_cast<std::size_t>(n));
  for (auto& t : out) t = pick(rng);
  return out;
}

bool same(const float* a, const float* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

std::vector<float> copy(ConstVectorRef v) { return {v.data(), v.data() + v.size()}; }

// Where two saved states first differ (-1: nowhere), so that a failure prints a position, not
// the bytes.
long first_difference(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return long(std::min(a.size(), b.size()));
  const auto at = std::mismatch(a.begin(), a.end(), b.begin());
  return at.first == a.end() ? -1L : long(at.first - a.begin());
}

// Every token's logits, then the state's bytes.
struct Run {
  std::vector<float> logits;
  std::string state;
};

Run stepped(const std::shared_ptr<const Model>& m, const std::vector<int>& ids) {
  Decoder d(m, {1, 1});
  Run r;
  for (const int t : ids) {
    const auto l = d.step(t);
    r.logits.insert(r.logits.end(), l.data(), l.data() + l.size());
  }
  r.state = d.save_bytes();
  return r;
}

Run prefilled(const std::shared_ptr<const Model>& m, const std::vector<int>& ids, int chunk,
              int threads) {
  Decoder d(m, {chunk, threads});
  Run r;
  const auto V = std::size_t(m->config().vocab_size);
  d.prefill(ids, {},
            [&](std::int64_t, const float* l) { r.logits.insert(r.logits.end(), l, l + V); });
  r.state = d.save_bytes();
  return r;
}

// Prefill at the given chunk sizes and thread counts gives stepping's bytes: every position's
// logits and the state after the last.
void check_chunks(const std::shared_ptr<const Model>& m, const std::vector<int>& ids,
                  const std::vector<int>& chunks, const std::vector<int>& threads) {
  const Run want = stepped(m, ids);
  for (const int chunk : chunks)
    for (const int t : threads) {
      INFO("chunk " << chunk << ", threads " << t);
      const Run got = prefilled(m, ids, chunk, t);
      REQUIRE(got.logits.size() == want.logits.size());
      const auto diff = std::mismatch(got.logits.begin(), got.logits.end(), want.logits.begin(),
                                      [](float a, float b) { return same(&a, &b, 1); });
      INFO("first differing logit: token "
           << (diff.first - got.logits.begin()) / m->config().vocab_size);
      CHECK(diff.first == got.logits.end());
      CHECK(first_difference(got.state, want.state) == -1);
    }
}

// Prefill split into calls and mixed with steps, without a logits sink, at a chunk size that
// divides none of the pieces: the logits after each call are stepping's.
void check_splits(const std::shared_ptr<const Model>& m, const std::vector<int>& ids) {
  const Run want = stepped(m, ids);
  const auto V = std::size_t(m->config().vocab_size);
  const auto at = [&](std::size_t pos) { return want.logits.data() + (pos - 1) * V; };
  for (const std::vector<int>& split :
       {std::vector<int>{1, 5, 250}, {100, 100, 37}, {255, 2}, {3}}) {
    Decoder d(m, {13, 2});
    std::size_t pos = 0;
    for (const int part : split) {
      if (pos >= ids.size()) break;
      const std::size_t n = std::min(std::size_t(part), ids.size() - pos);
      const auto l =
          d.prefill({ids.begin() + std::ptrdiff_t(pos), ids.begin() + std::ptrdiff_t(pos + n)});
      pos += n;
      INFO("split at " << pos);
      REQUIRE(same(l.data(), at(pos), V));
      if (pos < ids.size()) {
        const auto l2 = d.step(ids[pos]);
        ++pos;
        REQUIRE(same(l2.data(), at(pos), V));
      }
    }
    while (pos < ids.size()) d.step(ids[pos++]);
    CHECK(first_difference(d.save_bytes(), want.state) == -1);
  }
}

}  // namespace

TEST_CASE("every registered family has a fixture, and every fixture is a registered family's",
          "[conformance]") {
  std::map<const model::Family*, int> count;
  for (const model::Family* f : model::families()) count[f] = 0;
  for (const Fixture& f : fixtures()) {
    INFO(f.name);
    const model::Family* family = family_of(f);
    REQUIRE(family != nullptr);
    REQUIRE(count.count(family) == 1);
    ++count[family];
    CHECK(!f.refused.empty());  // each fixture checks at least one of its family's own fields
    CHECK_NOTHROW(config_of(f));
  }
  for (const auto& [family, n] : count) {
    INFO("family " << family->name() << " has no fixture in tests/conformance/fixtures.cpp");
    CHECK(n > 0);
  }
}

TEST_CASE("prefill in any chunk size, split and thread count gives the bytes of stepping",
          "[conformance][exact]") {
  for (const Fixture& f : fixtures()) {
    DYNAMIC_SECTION(f.name) {
      const ModelConfig c = config_of(f);
      const auto ids = tokens(kTokens, c.vocab_size, 9);
      const auto m = random_model(c, 5);
      check_chunks(m, ids, {1, 7, 64, kTokens}, {1, 2, 3});
      check_splits(m, ids);
      // 16-bit weights are kept 16-bit in memory: the same exactness on their own path.
      check_chunks(random_model(c, 5, DType::kBF16), ids, {7}, {2});
    }
  }
}

TEST_CASE(
    "every instruction set gives the scalar target's bytes, and a state saved under one "
    "continues under another",
    "[conformance][exact][isa]") {
  for (const Fixture& f : fixtures()) {
    DYNAMIC_SECTION(f.name) {
      const ModelConfig c = config_of(f);
      const auto m = random_model(c, 9);
      const auto prompt = tokens(kTokens, c.vocab_size, 3);
      const DecoderOptions options{48, 2};
      test::require_same_bytes(test::under_each([&] {
        Decoder d(m, options);
        std::string bytes;
        d.prefill(prompt, {}, [&](std::int64_t, const float* l) {
          test::append_bytes(bytes, l, std::size_t(c.vocab_size));
        });
        for (int t = 0; t < 12; ++t) {
          const auto l = d.step((t * 13) % c.vocab_size);
          test::append_bytes(bytes, l.data(), std::size_t(l.size()));
        }
        return bytes + d.save_bytes();
      }));
      // The scalar target's saved state, loaded under each set, continues with scalar's bytes.
      const test::IsaGuard guard;
      set_isa("scalar");
      Decoder a(m, options);
      a.prefill(prompt);
      const std::string saved = a.save_bytes();
      const auto want = copy(a.step(5));
      test::for_each_isa([&](const std::string& isa) {
        INFO("continued under " << isa);
        Decoder b(m, options);
        b.load_bytes(saved, "scalar's state");
        CHECK(same(b.step(5).data(), want.data(), want.size()));
      });
    }
  }
}

namespace {

// A sequence of the schedule below: the decoder in the batch, its twin decoded alone, and its
// tokens.
struct Sequence {
  Decoder batched, alone;
  std::vector<int> tokens;
  std::size_t next = 0;
};

// Sequences of different prompt lengths join and leave at random steps, in random order, some
// taking a chunk of several tokens (prefill) and some one; after every call each one's logits
// equal its twin's after Decoder::prefill or step of the same tokens, and at the end its state.
void check_schedule(const std::shared_ptr<const Model>& model, int threads, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const int V = model->config().vocab_size;
  std::vector<Sequence> seqs;
  for (int i = 0; i < 7; ++i) {
    Sequence s{Decoder(model, {8, threads}), Decoder(model, {8, 1}),
               tokens(24, V, seed + std::uint32_t(i))};
    const auto prompt = tokens(i * 6, V, seed * 31 + std::uint32_t(i));  // 0 to 36 tokens
    if (!prompt.empty()) {
      s.batched.prefill(prompt);
      for (const int t : prompt) s.alone.step(t);
    }
    seqs.push_back(std::move(s));
  }
  BatchDecoder batch(model, threads);
  std::bernoulli_distribution joins(0.6), chunk(0.3);
  std::uniform_int_distribution<int> chunk_size(2, 7);
  int largest = 0;
  for (int call = 0;; ++call) {
    std::vector<Sequence*> active;
    for (auto& s : seqs)
      if (s.next < s.tokens.size() && joins(rng)) active.push_back(&s);
    if (std::none_of(seqs.begin(), seqs.end(),
                     [](const Sequence& s) { return s.next < s.tokens.size(); }))
      break;
    if (active.empty()) continue;
    std::shuffle(active.begin(), active.end(), rng);
    std::vector<BatchDecoder::Item> items;
    for (Sequence* s : active) {
      const int left = int(s->tokens.size() - s->next);
      items.push_back({&s->batched, s->tokens.data() + s->next,
                       std::min(left, chunk(rng) ? chunk_size(rng) : 1)});
    }
    REQUIRE(batch.run(items) == 0);
    for (std::size_t k = 0; k < active.size(); ++k) {
      Sequence& s = *active[k];
      const auto first = s.tokens.begin() + std::ptrdiff_t(s.next);
      if (items[k].count == 1)
        s.alone.step(*first);
      else
        s.alone.prefill({first, first + items[k].count});
      s.next += std::size_t(items[k].count);
      INFO("call " << call << ", batch of " << active.size() << ", sequence at "
                   << s.alone.n_tokens() << " tokens, threads " << threads);
      REQUIRE(s.batched.n_tokens() == s.alone.n_tokens());
      REQUIRE(same(s.batched.logits().data(), s.alone.logits().data(), std::size_t(V)));
    }
    largest = std::max(largest, int(active.size()));
  }
  CHECK(largest >= 4);  // the schedule did batch several sequences together
  for (auto& s : seqs) CHECK(first_difference(s.batched.save_bytes(), s.alone.save_bytes()) == -1);
}

}  // namespace

TEST_CASE("each sequence of a batch gets the bytes it gets alone, whoever else is in it",
          "[conformance][batch]") {
  for (const Fixture& f : fixtures()) {
    DYNAMIC_SECTION(f.name) {
      const ModelConfig c = config_of(f);
      const auto m = random_model(c, 3);
      for (const int threads : {1, 2, 3}) check_schedule(m, threads, 11u + std::uint32_t(threads));
      check_schedule(random_model(c, 3, DType::kBF16), 2, 17);
    }
  }
}

TEST_CASE("a saved state continues with the bytes of one run; a clone branches alone",
          "[conformance][state]") {
  for (const Fixture& f : fixtures()) {
    DYNAMIC_SECTION(f.name) {
      const ModelConfig c = config_of(f);
      const auto m = random_model(c, 2);
      const auto ids = tokens(kSanitized ? 60 : 200, c.vocab_size, 4);
      const auto V = std::size_t(c.vocab_size);
      const auto cut = ids.begin() + std::ptrdiff_t(ids.size() * 2 / 3);  // 133 of 200
      const std::vector<int> head(ids.begin(), cut), tail(cut, ids.end());
      Decoder whole(m, {32, 1});
      whole.prefill(ids);

      TempDir dir;
      Decoder a(m, {32, 2});
      a.prefill(head);
      a.save(dir.file("mid.state"));
      Decoder b(m, {5, 3});  // a fresh decoder, other options
      b.load(dir.file("mid.state"));
      CHECK(b.n_tokens() == std::int64_t(head.size()));
      CHECK(same(b.logits().data(), a.logits().data(), V));
      b.prefill(tail);
      CHECK(same(b.logits().data(), whole.logits().data(), V));
      CHECK(first_difference(b.save_bytes(), whole.save_bytes()) == -1);

      // A clone taken mid-sequence follows its own branch; the original is untouched by it.
      Decoder fork = a.clone();
      fork.prefill({1, 2});
      a.prefill(tail);
      CHECK(first_difference(a.save_bytes(), whole.save_bytes()) == -1);
      std::vector<int> branch = head;
      branch.push_back(1);
      branch.push_back(2);
      Decoder straight(m);
      straight.prefill(branch);
      CHECK(first_difference(fork.save_bytes(), straight.save_bytes()) == -1);

      // Only a full softmax layer's cache grows; every other state keeps its size.
      const std::size_t bytes = whole.state_bytes();
      whole.prefill(tokens(50, c.vocab_size, 5));
      CHECK((whole.state_bytes() == bytes) == !whole.state_grows());
    }
  }
}

namespace {

// The tensors of a quantized model's directory with every quantized matrix dequantized (its
// codes times its scales, as the kernels use them), and the rest as stored.
class Dequantized final : public WeightSource {
 public:
  explicit Dequantized(const std::string& dir) : store_(TensorStore::open_dir(dir)) {}
  bool has(const std::string& n) const override { return store_.contains(n) && !is_scale(n); }
  Shape shape(const std::string& n) const override {
    Shape s = store_.info(n).shape;
    if (store_.info(n).dtype == DType::kU8) s.at(1) *= 2;  // two q4 codes a byte
    return s;
  }
  std::vector<float> read(const std::string& n) const override {
    const TensorInfo& info = store_.info(n);
    if (info.dtype != DType::kI8 && info.dtype != DType::kU8) return store_.read(n);
    kernels::QuantizedRows q;
    q.type = info.dtype == DType::kI8 ? kernels::QuantType::kQ8 : kernels::QuantType::kQ4;
    const Shape s = shape(n);
    q.n_out = int(s[0]);
    q.k_in = int(s[1]);
    q.codes = store_.read_bytes(n);
    const auto raw = store_.read_bytes(n + "_scale");
    q.scales.resize(raw.size() / 2);
    for (std::size_t i = 0; i < q.scales.size(); ++i)
      q.scales[i] = std::uint16_t(raw[2 * i] | (raw[2 * i + 1] << 8));
    std::vector<float> w(std::size_t(q.n_out) * std::size_t(q.k_in));
    kernels::dequantize_rows(q, w.data());
    return w;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [n, info] : store_.tensors())
      if (!is_scale(n)) out.push_back(n);
    return out;
  }
  std::string describe() const override { return "dequantized " + store_.source(); }

 private:
  TensorStore store_;
  bool is_scale(const std::string& n) const {
    return n.size() > 6 && n.compare(n.size() - 6, 6, "_scale") == 0 &&
           store_.contains(n.substr(0, n.size() - 6));
  }
};

// The first tensor whose dtype, shape or bytes differ between two model directories ("" when
// none does, and both hold the same names).
std::string first_tensor_difference(const std::string& a, const std::string& b) {
  const TensorStore x = TensorStore::open_dir(a), y = TensorStore::open_dir(b);
  for (const auto& [name, info] : x.tensors()) {
    if (!y.contains(name)) return name + " (missing from the second)";
    const TensorInfo& other = y.info(name);
    if (info.dtype != other.dtype || info.shape != other.shape ||
        x.read_bytes(name) != y.read_bytes(name))
      return name;
  }
  return x.tensors().size() == y.tensors().size() ? "" : "(a tensor the first lacks)";
}

}  // namespace

TEST_CASE(
    "q8 and q4 weights quantize back to their own codes from their dequantized values, "
    "and keep prefill, batch and saved states exact",
    "[conformance][quant]") {
  for (const Fixture& f : fixtures()) {
    DYNAMIC_SECTION(f.name) {
      const ModelConfig c = config_of(f);
      const auto ids = tokens(kSanitized ? 40 : 120, c.vocab_size, 6);
      std::map<std::string, std::uint64_t> fingerprints;
      for (const auto& [format, head] :
           {std::pair<std::string, std::string>{"q8", ""}, {"q4", "q8"}}) {
        INFO(format << ", head " << (head.empty() ? format : head));
        TempDir first, again;
        const QuantizeReport r =
            write_quantized_model(first.str(), c, RandomWeights(c, 5), {format, head});
        CHECK(r.quantized > 0);
        write_quantized_model(again.str(), c, Dequantized(first.str()), {format, head});
        CHECK(first_tensor_difference(first.str(), again.str()) == "");

        const auto m = Model::load(first.str());
        CHECK(m->weight_format().rfind(format, 0) == 0);
        fingerprints[format] = m->fingerprint();
        check_chunks(m, ids, {7, 64}, {2});
        check_schedule(m, 2, 7);
        // A saved state continues on this model, and is another model's to the float one.
        Decoder a(m, {16, 1}), whole(m, {16, 1});
        const auto half = ids.begin() + std::ptrdiff_t(ids.size() / 2);
        a.prefill({ids.begin(), half});
        whole.prefill(ids);
        Decoder b(m, {5, 2});
        b.load_bytes(a.save_bytes(), "quantized state");
        b.prefill({half, ids.end()});
        CHECK(first_difference(b.save_bytes(), whole.save_bytes()) == -1);
        Decoder plain(random_model(c, 5));
        CHECK_THROWS_WITH(plain.load_bytes(a.save_bytes(), "quantized state"),
                          Contains("another model"));
        CHECK(plain.n_tokens() == 0);
      }
      CHECK(fingerprints["q8"] != fingerprints["q4"]);
      CHECK(fingerprints["q8"] != random_model(c, 5)->fingerprint());
    }
  }
}

namespace {

std::string refusal(const std::string& json) {
  try {
    ModelConfig::from_json(json, "config.json");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(read)";
}

}  // namespace

TEST_CASE(
    "a config field the family cannot run is refused, naming the field; a config written "
    "out reads back as itself",
    "[conformance][config]") {
  for (const Fixture& f : fixtures()) {
    DYNAMIC_SECTION(f.name) {
      for (const auto& r : f.refused) {
        INFO(r.from << " -> " << r.to);
        std::string json = f.config;
        const auto at = json.find(r.from);
        REQUIRE(at != std::string::npos);
        REQUIRE(json.find(r.from, at + 1) == std::string::npos);
        CHECK_THAT(refusal(json.replace(at, r.from.size(), r.to)), Contains(r.says));
      }
      // A key nobody reads, at the top.
      CHECK_THAT(refusal("{\"recur_unknown_key\": 1, " + f.config.substr(f.config.find('{') + 1)),
                 Contains("recur_unknown_key"));
      const ModelConfig c = config_of(f);
      const ModelConfig back = ModelConfig::from_json(c.to_json(), "written");
      CHECK(back.to_json() == c.to_json());
      CHECK(model_tensor_shapes(back) == model_tensor_shapes(c));
    }
  }
}

namespace {

// Random weights held in memory (generated once), with one tensor hidden, reshaped or added.
class Edited final : public WeightSource {
 public:
  explicit Edited(const WeightSource& from) {
    for (const auto& n : from.names()) t_[n] = {from.shape(n), from.read(n)};
  }
  Edited& hide(const std::string& name) {
    t_.erase(name);
    return *this;
  }
  Edited& put(const std::string& name, Shape shape) {
    std::size_t count = 1;
    for (const auto d : shape) count *= std::size_t(d);
    t_[name] = {std::move(shape), std::vector<float>(count, 0.5f)};
    return *this;
  }
  bool has(const std::string& n) const override { return t_.count(n) != 0; }
  Shape shape(const std::string& n) const override { return t_.at(n).first; }
  std::vector<float> read(const std::string& n) const override { return t_.at(n).second; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [n, v] : t_) out.push_back(n);
    return out;
  }
  std::string describe() const override { return "edited weights"; }

 private:
  std::map<std::string, std::pair<Shape, std::vector<float>>> t_;
};

std::string refusal(const ModelConfig& c, const WeightSource& w) {
  try {
    Model::from_weights(c, w);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(loaded)";
}

// A shape as the loader's messages print it: "(4, 8)", "(32,)".
std::string shape_text(const Shape& s) {
  std::string out;
  for (const auto d : s) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "(" + out + (s.size() == 1 ? ",)" : ")");
}

// Misshapen: one more column; the dimensions reversed (the same count, as a transposed matrix
// has); another rank of the same count: a leading 1 added, or the 1s dropped ([C] for RWKV's
// [1, 1, C]).
std::vector<Shape> misshapes(const Shape& s) {
  std::vector<Shape> out;
  Shape wider = s;
  wider.back() += 1;
  out.push_back(wider);
  const Shape reversed(s.rbegin(), s.rend());
  if (reversed != s) out.push_back(reversed);
  Shape ranked = s;
  ranked.insert(ranked.begin(), 1);
  out.push_back(ranked);
  Shape squeezed;
  std::copy_if(s.begin(), s.end(), std::back_inserter(squeezed),
               [](std::int64_t d) { return d != 1; });
  if (!squeezed.empty() && squeezed != s) out.push_back(squeezed);
  return out;
}

// A tensor of the layer after the last, which config.json does not have.
std::string next_layer_name(const std::vector<std::string>& names, int layers) {
  const std::string last = "." + std::to_string(layers - 1) + ".";
  for (const auto& n : names)
    if (const auto at = n.find(last); at != std::string::npos)
      return n.substr(0, at) + "." + std::to_string(layers) + "." + n.substr(at + last.size());
  return "";
}

}  // namespace

TEST_CASE("a missing, misshapen or unknown tensor is refused, naming the tensor and the shapes",
          "[conformance][tensors]") {
  for (const Fixture& f : fixtures()) {
    DYNAMIC_SECTION(f.name) {
      const ModelConfig c = config_of(f);
      const Edited w{RandomWeights(c, 7)};
      REQUIRE_NOTHROW(Model::from_weights(c, w));
      for (const std::string& name : w.names()) {
        INFO(name);
        CHECK_THAT(refusal(c, Edited(w).hide(name)), Contains("'" + name + "'"));
        for (const Shape& wrong : misshapes(w.shape(name))) {
          INFO("as " << shape_text(wrong));
          CHECK_THAT(refusal(c, Edited(w).put(name, wrong)),
                     Contains("'" + name + "'") && Contains(shape_text(wrong)) &&
                         Contains(shape_text(w.shape(name))));
        }
      }
      const std::string extra = next_layer_name(w.names(), c.num_hidden_layers);
      REQUIRE(!extra.empty());
      for (const std::string& name : {extra, std::string("recur.unknown.weight")})
        CHECK_THAT(refusal(c, Edited(w).put(name, {4})), Contains("'" + name + "'"));
    }
  }
}

namespace {

// A state whose checksum is recomputed after an edit: only the checks behind it can refuse it.
std::string resealed(std::string bytes, std::size_t at, float value) {
  std::memcpy(bytes.data() + at, &value, sizeof value);
  detail::Hasher hash;
  hash.update(bytes.data(), bytes.size() - 8);
  const std::uint64_t d = hash.digest();
  std::memcpy(bytes.data() + bytes.size() - 8, &d, 8);
  return bytes;
}

// Where each layer's record ends in a saved state (engine/model/decoder.cpp's layout: a 40-byte
// header, then per layer its size and its raw bytes, which end in its token count).
std::vector<std::size_t> layer_ends(const std::string& bytes, int layers) {
  std::vector<std::size_t> out;
  std::size_t at = 40;
  for (int l = 0; l < layers; ++l) {
    std::uint64_t size = 0;
    REQUIRE(at + 8 <= bytes.size());
    std::memcpy(&size, bytes.data() + at, 8);
    at += 8 + size;
    REQUIRE(at <= bytes.size());
    out.push_back(at);
  }
  return out;
}

}  // namespace

TEST_CASE("bad tokens, batches and state bytes are refused and leave every state as it was",
          "[conformance][errors]") {
  for (const Fixture& f : fixtures()) {
    DYNAMIC_SECTION(f.name) {
      const ModelConfig c = config_of(f);
      const int V = c.vocab_size;
      const auto m = random_model(c, 2);
      Decoder d(m, {8, 2}), other(m, {8, 1});
      d.prefill(tokens(20, V, 1));
      other.prefill(tokens(5, V, 2));
      const std::string before = d.save_bytes(), other_before = other.save_bytes();
      const auto unchanged = [&] {
        CHECK(d.n_tokens() == 20);
        // Every layer's state, the count, the logits.
        CHECK(first_difference(d.save_bytes(), before) == -1);
        CHECK(first_difference(other.save_bytes(), other_before) == -1);
      };
      CHECK_THROWS_WITH(d.prefill({1, 2, V}), Contains("tokens[2] is " + std::to_string(V)));
      CHECK_THROWS_WITH(d.step(-1), Contains("token is -1"));
      CHECK_THROWS_AS(d.step(V), ArgumentError);
      unchanged();
      BatchDecoder batch(m, 2);
      const int good[3] = {1, 2, 3}, bad[3] = {1, 2, V};
      CHECK_THROWS_WITH(batch.run({{&d, good, 3}, {&other, bad, 3}}),
                        Contains("items[1].tokens[2]"));
      unchanged();

      CHECK_THROWS_AS(d.load_bytes(before.substr(0, before.size() / 2), "cut"), FormatError);
      std::string flipped = before;
      flipped[flipped.size() / 2] = char(flipped[flipped.size() / 2] ^ 0x10);
      CHECK_THROWS_WITH(d.load_bytes(flipped, "flipped"), Contains("checksum"));
      CHECK_THROWS_WITH(d.load_bytes(Decoder(random_model(c, 3)).save_bytes(), "stranger"),
                        Contains("another model"));
      unchanged();
      // A NaN in the last number before each layer's token count, behind a valid checksum. The
      // saved layers are the network's: a block without state (Nemotron-H's MLP) saves none.
      const auto ends = layer_ends(before, int(model::impl_of(*m).network->n_layers()));
      for (std::size_t l = 0; l < ends.size(); ++l) {
        INFO("layer " << l);
        CHECK_THROWS_AS(
            d.load_bytes(resealed(before, ends[l] - 12, std::numeric_limits<float>::quiet_NaN()),
                         "edited"),
            FormatError);
      }
      unchanged();
      d.load_bytes(before, "good");  // and the good bytes still load
      CHECK(first_difference(d.save_bytes(), before) == -1);
    }
  }
}
