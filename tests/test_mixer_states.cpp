// The public mixer states' saved bytes across versions: a state saved by an older build (the
// fixtures of tests/fixtures/mixer_states, written before the states became declared buffers)
// loads in this one and continues with the bytes that build gave: the same outputs and the same
// state after five more tokens. One case per state and layout: LinearState (normalized and not),
// ShortConvState, WindowState, CausalState (a full cache past its first page, and a ring) and
// GlaState (with padding in both dimensions).
//
// The fixtures are written by the hidden case "[.write]" (test_mixer_states "[.write]"), which
// only a change of the saved format may run: the format is then a new one, and the old fixtures
// stay to be read.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "recur/causal_attention.h"
#include "recur/gla_recurrence.h"
#include "recur/linear_attention.h"
#include "recur/short_conv.h"
#include "recur/window_attention.h"

namespace {

using namespace recur;
using Bytes = std::vector<unsigned char>;

constexpr int kSaved = 70;     // tokens before the state is saved (past a full cache's first page)
constexpr int kContinued = 5;  // tokens after it is loaded

// Input i of stream `stream` at token t: a float in [-1, 1) with 24 bits, from a hash of the
// three (splitmix64), so that the fixtures do not depend on a library's random distributions.
float input(int t, int i, int stream) {
  std::uint64_t z = (std::uint64_t(t) << 40) ^ (std::uint64_t(i) << 8) ^ std::uint64_t(stream);
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(z >> 40) / float(1 << 23) - 1.0f;
}

Eigen::VectorXf inputs(int t, int n, int stream) {
  Eigen::VectorXf v(n);
  for (int i = 0; i < n; ++i) v(i) = input(t, i, stream);
  return v;
}

// One layer and its state, reached through what the test does with them.
struct Mixer {
  std::function<Eigen::VectorXf(int t)> step;  // token t's inputs through the state
  std::function<Bytes()> save;
  std::function<void(const Bytes&)> load;
};

// A mixer of layer `L` whose state is S, stepping token t through `step(layer, state, t)`.
template <class L, class S, class Step>
Mixer mixer(L layer, Step step) {
  auto l = std::make_shared<L>(std::move(layer));
  auto s = std::make_shared<S>(l->make_state());
  return {[l, s, step](int t) { return step(*l, *s, t); }, [s] { return s->raw_bytes(); },
          [s](const Bytes& b) { s->load_raw_bytes(b.data(), b.size()); }};
}

Mixer linear(bool normalized) {
  LinearAttentionConfig c;
  c.n_heads = 2;
  c.d_key = 4;
  c.d_value = 5;
  c.normalized = normalized;
  return mixer<LinearAttention, LinearState>(
      LinearAttention(c), [](const LinearAttention& l, LinearState& s, int t) {
        return l.step(s, inputs(t, 8, 0), inputs(t, 8, 1), inputs(t, 10, 2));
      });
}

Mixer short_conv() {
  RowMatrix w(6, 4);
  for (int c = 0; c < 6; ++c)
    for (int k = 0; k < 4; ++k) w(c, k) = input(-1, c * 4 + k, 3);
  return mixer<ShortConvolution, ShortConvState>(
      ShortConvolution(w, inputs(-1, 6, 4)),
      [](const ShortConvolution& l, ShortConvState& s, int t) {
        return l.step(s, inputs(t, 6, 0));
      });
}

Mixer window() {
  WindowAttentionConfig c;
  c.n_heads = 2;
  c.d_head = 4;
  c.window = 3;
  return mixer<WindowAttention, WindowState>(
      WindowAttention(c), [](const WindowAttention& l, WindowState& s, int t) {
        return l.step(s, inputs(t, 8, 0), inputs(t, 8, 1), inputs(t, 8, 2));
      });
}

Mixer causal(int window) {
  CausalAttentionConfig c;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_head = 4;
  c.window = window;
  return mixer<CausalAttention, CausalState>(
      CausalAttention(c), [](const CausalAttention& l, CausalState& s, int t) {
        Eigen::VectorXf out(16);
        l.step(s, inputs(t, 16, 0), inputs(t, 8, 1), inputs(t, 8, 2), out);
        return out;
      });
}

Mixer gla() {
  GlaRecurrenceConfig c;
  c.n_heads = 2;
  c.d_key = 3;
  c.d_value = 5;
  return mixer<GlaRecurrence, GlaState>(
      GlaRecurrence(c), [](const GlaRecurrence& l, GlaState& s, int t) {
        const Eigen::VectorXf alpha = (inputs(t, 6, 3).array() * 0.25f + 0.75f).matrix();  // in [0.5, 1)
        return l.step(s, inputs(t, 6, 0), inputs(t, 6, 1), inputs(t, 10, 2), alpha);
      });
}

struct Case {
  const char* name;
  std::function<Mixer()> make;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"linear", [] { return linear(true); }},
      {"linear-unnormalized", [] { return linear(false); }},
      {"short_conv", short_conv},
      {"window", window},
      {"causal-full", [] { return causal(0); }},
      {"causal-window", [] { return causal(5); }},
      {"gla", gla},
  };
  return all;
}

// A fixture: the state saved after kSaved tokens, the outputs of the next kContinued tokens and
// the state after them, each a u64 byte count and the bytes.
struct Fixture {
  Bytes saved, outputs, continued;
};

std::string path_of(const Case& c) {
  return std::string(RECUR_TEST_FIXTURES) + "/mixer_states/" + c.name + ".bin";
}

Bytes as_bytes(const std::vector<Eigen::VectorXf>& rows) {
  Bytes out;
  for (const auto& r : rows) {
    const auto* p = reinterpret_cast<const unsigned char*>(r.data());
    out.insert(out.end(), p, p + r.size() * sizeof(float));
  }
  return out;
}

// The outputs of tokens kSaved .. kSaved + kContinued - 1 through m.
Bytes continue_run(Mixer& m) {
  std::vector<Eigen::VectorXf> rows;
  for (int t = kSaved; t < kSaved + kContinued; ++t) rows.push_back(m.step(t));
  return as_bytes(rows);
}

Fixture read_fixture(const Case& c) {
  std::ifstream in(path_of(c), std::ios::binary);
  REQUIRE(in);
  const Bytes all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Fixture f;
  std::size_t pos = 0;
  for (Bytes* part : {&f.saved, &f.outputs, &f.continued}) {
    std::uint64_t n = 0;
    REQUIRE(pos + sizeof n <= all.size());
    std::memcpy(&n, all.data() + pos, sizeof n);
    pos += sizeof n;
    REQUIRE(pos + n <= all.size());
    part->assign(all.begin() + long(pos), all.begin() + long(pos + n));
    pos += n;
  }
  REQUIRE(pos == all.size());
  return f;
}

}  // namespace

TEST_CASE("a mixer state saved by an older build loads and continues with that build's bytes",
          "[state][format]") {
  for (const Case& c : cases()) {
    SECTION(c.name) {
      const Fixture f = read_fixture(c);
      Mixer m = c.make();
      m.load(f.saved);
      CHECK(m.save() == f.saved);
      CHECK(continue_run(m) == f.outputs);
      CHECK(m.save() == f.continued);
    }
  }
}

TEST_CASE("the mixer states' fixtures are written (only for a new saved format)", "[.write]") {
  for (const Case& c : cases()) {
    Mixer m = c.make();
    for (int t = 0; t < kSaved; ++t) m.step(t);
    Fixture f;
    f.saved = m.save();
    f.outputs = continue_run(m);
    f.continued = m.save();
    std::ofstream out(path_of(c), std::ios::binary);
    for (const Bytes* part : {&f.saved, &f.outputs, &f.continued}) {
      const std::uint64_t n = part->size();
      out.write(reinterpret_cast<const char*>(&n), sizeof n);
      out.write(reinterpret_cast<const char*>(part->data()), std::streamsize(n));
    }
    REQUIRE(out);
  }
}
