// Saved states and state files: a quantized model's saved state continues bit-identically, and
// every bad, corrupt or lying file is refused with the decoder left as it was. That a saved
// state continues and a clone branches alone, for every family, is test_conformance's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "recur/error.h"
#include "model/declared_state.h"
#include "model/random_weights.h"
#include "recur/model.h"
#include "recur/sampling.h"
#include "recur/short_conv.h"
#include "support/model_cases.h"
#include "support/quant_model.h"
#include "support/temp_dir.h"
#include "util/file.h"
#include "util/hash.h"

using namespace recur;
using recur::models::linear::ModelFeatureMap;
using recur::testing::kSanitized;
using recur::testing::quantized_model;
using recur::testing::random_tokens;
using recur::testing::same_bytes;
using recur::testing::small_fla;
using recur::testing::TempDir;

TEST_CASE("a quantized model's saved state continues bit-identically, and only on that model",
          "[model][state][quant]") {
  const ModelConfig c = small_fla(ModelFeatureMap::kHedgehog, true);
  const auto q8 = quantized_model(c, 2, "q8");
  const auto q4 = quantized_model(c, 2, "q4");
  const auto f32 = Model::from_weights(c, RandomWeights(c, 2));
  CHECK(q8->fingerprint() != q4->fingerprint());
  CHECK(q8->fingerprint() != f32->fingerprint());
  CHECK(q8->fingerprint() == quantized_model(c, 2, "q8")->fingerprint());
  const auto tokens = random_tokens(kSanitized ? 60 : 290, c.vocab_size, 4);
  const auto nV = static_cast<std::size_t>(c.vocab_size);
  const std::size_t half = tokens.size() / 2;
  for (const auto& model : {q8, q4}) {
    Decoder whole(model, {32, 1});
    whole.prefill(tokens);
    Decoder a(model, {32, 2});
    a.prefill(std::vector<int>(tokens.begin(), tokens.begin() + std::ptrdiff_t(half)));
    const std::string bytes = a.save_bytes();
    Decoder b(model, {5, 1});
    b.load_bytes(bytes, "q state");
    for (std::size_t i = half; i < tokens.size(); ++i) b.step(tokens[i]);
    CHECK(same_bytes(b.logits().data(), whole.logits().data(), nV));
    // Another format of the same weights is another model: its state is refused.
    Decoder other(model == q8 ? q4 : q8);
    CHECK_THROWS_AS(other.load_bytes(bytes, "q state"), FormatError);
    Decoder plain(f32);
    CHECK_THROWS_AS(plain.load_bytes(bytes, "q state"), FormatError);
    CHECK(plain.n_tokens() == 0);
  }
}

TEST_CASE("bad state files are rejected and leave the decoder as it was", "[model][state]") {
  const ModelConfig c = small_fla(ModelFeatureMap::kElu, true);
  const auto model = Model::from_weights(c, RandomWeights(c, 2));
  const auto other_weights = Model::from_weights(c, RandomWeights(c, 3));
  ModelConfig c2 = c;
  c2.num_hidden_layers = 3;
  const auto other_shape = Model::from_weights(c2, RandomWeights(c2, 2));
  TempDir dir;
  const auto tokens = random_tokens(50, c.vocab_size, 1);

  Decoder saver(model);
  saver.prefill(tokens);
  const std::string good = dir.file("good.state");
  saver.save(good);
  const std::string bytes = *recur::detail::read_file(good);
  const auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream out(dir.file(name), std::ios::binary);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    return dir.file(name);
  };

  Decoder victim(model);
  victim.prefill({1, 2, 3});
  const Eigen::VectorXf logits_before = victim.logits();
  const std::string victim_bytes = victim.save_bytes();
  const auto expect_rejected = [&](const std::string& path, const std::string& fragment) {
    INFO(path);
    try {
      victim.load(path);
      FAIL("load accepted a bad file");
    } catch (const FormatError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(fragment) != std::string::npos);
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
    CHECK(victim.n_tokens() == 3);
    CHECK(same_bytes(victim.logits().data(), logits_before.data(), static_cast<std::size_t>(logits_before.size())));
    CHECK(victim.save_bytes() == victim_bytes);  // every layer's state too
  };

  expect_rejected(write("truncated.state", bytes.substr(0, bytes.size() / 2)), "bytes");
  expect_rejected(write("empty.state", ""), "too short");
  std::string flipped = bytes;
  flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x10);
  expect_rejected(write("flipped.state", flipped), "checksum");
  std::string magic = bytes;
  magic[0] = 'X';
  expect_rejected(write("magic.state", magic), "magic");
  std::string version = bytes;
  version[8] = 9;
  expect_rejected(write("version.state", version), "version");
  expect_rejected(write("long.state", bytes + "x"), "bytes");

  Decoder other(other_weights);
  other.prefill(tokens);
  other.save(dir.file("other.state"));
  expect_rejected(dir.file("other.state"), "another model");
  Decoder shaped(other_shape);
  shaped.prefill(tokens);
  shaped.save(dir.file("shaped.state"));
  expect_rejected(dir.file("shaped.state"), "bytes");
  expect_rejected(dir.file("missing.state"), "cannot read");

  // And the good file still loads.
  victim.load(good);
  CHECK(victim.n_tokens() == 50);
}

TEST_CASE("state files: random corruption is refused and changes nothing", "[model][state]") {
  const ModelConfig c = small_fla(ModelFeatureMap::kElu, true);
  const auto model = Model::from_weights(c, RandomWeights(c, 2));
  TempDir dir;
  Decoder saver(model);
  saver.prefill(random_tokens(30, c.vocab_size, 1));
  saver.save(dir.file("s"));
  const std::string good = *recur::detail::read_file(dir.file("s"));
  Decoder victim(model);
  victim.prefill({5, 6});
  const std::string victim_bytes = victim.save_bytes();
  std::mt19937 rng(5);
  int refused = 0;
  const int trials = kSanitized ? 60 : 300;
  for (int trial = 0; trial < trials; ++trial) {
    std::string bytes = good;
    if (trial % 2 == 0) {
      bytes.resize(std::uniform_int_distribution<std::size_t>(0, good.size() - 1)(rng));
    } else {
      const auto at = std::uniform_int_distribution<std::size_t>(0, good.size() - 1)(rng);
      bytes[at] = static_cast<char>(bytes[at] ^ (1 << (trial % 8)));
    }
    {
      std::ofstream out(dir.file("bad"), std::ios::binary);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    try {
      victim.load(dir.file("bad"));
    } catch (const FormatError&) {
      ++refused;
    }
    REQUIRE(victim.save_bytes() == victim_bytes);  // every layer's sums, the count, the logits
  }
  CHECK(refused == trials);
}

namespace {
// A state file whose checksum is recomputed after an edit: only the checks behind the
// checksum can refuse it.
std::string resealed(std::string bytes) {
  recur::detail::Hasher hash;
  hash.update(bytes.data(), bytes.size() - 8);
  const std::uint64_t d = hash.digest();
  std::memcpy(bytes.data() + bytes.size() - 8, &d, 8);
  return bytes;
}
template <class T>
std::string with(std::string bytes, std::size_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof value);
  return resealed(std::move(bytes));
}
}  // namespace

TEST_CASE("a state file's checksum is the same however its bytes are fed", "[model][state]") {
  // Whole blocks are hashed straight from the input and the rest through a buffer: every split
  // must give the digest of the bytes at once.
  std::string bytes(10007, '\0');
  std::mt19937 rng(3);
  for (auto& c : bytes) c = static_cast<char>(rng());
  recur::detail::Hasher whole;
  whole.update(bytes.data(), bytes.size());
  for (std::size_t piece : {1u, 3u, 7u, 31u, 32u, 33u, 64u, 100u, 4096u}) {
    recur::detail::Hasher parts;
    for (std::size_t at = 0; at < bytes.size(); at += piece)
      parts.update(bytes.data() + at, std::min(piece, bytes.size() - at));
    INFO("pieces of " << piece << " bytes");
    CHECK(parts.digest() == whole.digest());
  }
  recur::detail::Hasher other;
  bytes[5000] ^= 1;
  other.update(bytes.data(), bytes.size());
  CHECK(other.digest() != whole.digest());
}

TEST_CASE("a state file that passes its checksum but says false things is refused", "[model][state]") {
  const ModelConfig c = small_fla(ModelFeatureMap::kElu, true);
  const auto model = Model::from_weights(c, RandomWeights(c, 2));
  Decoder saver(model);
  saver.prefill(random_tokens(50, c.vocab_size, 1));
  SessionData session;
  session.tokens = {1, 2, 3};
  session.has_sampler_state = true;
  session.sampler_state = 99;
  const std::string good = saver.save_bytes(&session);

  // The layout (engine/model/decoder.cpp): a 40-byte header, then per layer a size and its raw
  // sums ending in its token count, the logits, the session, the checksum.
  const std::size_t raw = (good.size() - 40 - 4 * std::size_t(c.vocab_size) - 20 - 4 * 3 - 8) / 2 - 8;
  const std::size_t layer0 = 48, layer1 = layer0 + raw + 8;
  const std::size_t logits = layer1 + raw, sess = logits + 4 * std::size_t(c.vocab_size);
  REQUIRE(sess + 20 + 12 + 8 == good.size());
  std::int64_t count = 0;
  std::memcpy(&count, good.data() + layer1 + raw - 8, 8);
  REQUIRE(count == 50);  // the layout above is right

  Decoder victim(model);
  victim.prefill({4, 5});
  const std::string before = victim.save_bytes();
  SessionData untouched;
  untouched.tokens = {7};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto refused = [&](const std::string& bytes, const std::string& fragment) {
    INFO(fragment);
    SessionData out = untouched;
    try {
      victim.load_bytes(bytes, "edited.state", &out);
      FAIL("accepted");
    } catch (const FormatError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(fragment) != std::string::npos);
      CHECK(std::string(e.what()).find("edited.state") != std::string::npos);
    }
    CHECK(victim.save_bytes() == before);
    CHECK(out.tokens == untouched.tokens);
  };
  refused(with(good, layer0, nan),
          "layer 0: [LinearState::load_raw_bytes] the state's P of head 0 has a non-finite number");
  refused(with(good, layer1 + 64, std::numeric_limits<float>::infinity()), "layer 1");
  refused(with(good, 24, std::int64_t{-5}), "token count is -5");
  refused(with(good, 24, std::int64_t{49}), "layer 0 has seen 50 tokens, the header says 49");
  refused(with(good, layer1 + raw - 8, std::int64_t{51}), "layer 1 has seen 51 tokens");
  refused(with(good, layer0 + raw - 8, std::int64_t{-1}), "layer 0: [LinearState::load_raw_bytes] the token count is -1");
  refused(with(good, 12, std::uint32_t{3}), "3 layers, the model has 2");
  refused(with(good, 36, std::uint32_t{2}), "has_logits is 2");
  refused(with(good, 36, std::uint32_t{0}), "has_logits is 0 after 50 tokens");
  refused(with(good, 32, std::uint32_t{999}), "vocab_size 999");
  refused(with(good, logits + 8, nan), "logits are not finite");
  refused(with(good, sess, std::uint32_t{7}), "flags");
  refused(with(good, sess + 20 + 4, std::int32_t{c.vocab_size}), "session token 1 is 300");
  refused(with(good, sess + 20 + 8, std::int32_t{-1}), "session token 2 is -1");

  // And the unedited bytes load, with their session.
  SessionData out;
  victim.load_bytes(good, "good.state", &out);
  CHECK(victim.save_bytes(&session) == good);
  CHECK(out.tokens == session.tokens);
  CHECK(out.has_sampler_state);
  CHECK(out.sampler_state == 99);
}

TEST_CASE("a state without a session loads with an empty one; save to a file equals save_bytes",
          "[model][state]") {
  const auto model = Model::builtin(1);
  TempDir dir;
  Decoder a(model);
  a.prefill({1, 2, 3});
  a.save(dir.file("s"));
  CHECK(*recur::detail::read_file(dir.file("s")) == a.save_bytes());
  SessionData out;
  out.tokens = {9};
  Decoder b(model);
  b.load(dir.file("s"), &out);
  CHECK(out.tokens.empty());
  CHECK_FALSE(out.has_sampler_state);
  CHECK(b.save_bytes() == a.save_bytes());
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.str())) files += e.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("saving refuses to replace what is not a regular file and leaves nothing behind",
          "[model][state]") {
  const auto model = Model::builtin(1);
  TempDir dir;
  Decoder a(model);
  a.prefill({1, 2, 3});
  std::filesystem::create_directory(dir.file("sub"));
  CHECK_THROWS_WITH(a.save(dir.file("sub")), Catch::Contains("is a directory"));
  // (A machine whose /dev/null was once replaced by a regular file cannot run this check.)
  REQUIRE(std::filesystem::is_character_file("/dev/null"));
  CHECK_THROWS_WITH(a.save("/dev/null"), Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(a.save(dir.file("missing/x.state")), Catch::Contains("does not exist"));
  // A link is followed: the link stays a link, and its target gets the state.
  a.save(dir.file("target.state"));
  std::filesystem::create_symlink("target.state", dir.file("link.state"));
  a.step(4);
  a.save(dir.file("link.state"));
  CHECK(std::filesystem::is_symlink(dir.file("link.state")));
  CHECK(*recur::detail::read_file(dir.file("target.state")) == a.save_bytes());
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.str()))
    files += e.is_regular_file() && !e.is_symlink();
  CHECK(files == 1);  // target.state; no temporary files
}

namespace {

// A state declared as its parts (model/declared_state.h): a buffer and a convolution's state,
// inside a frame of format 7.
struct ToyState final : model::DeclaredState<ToyState> {
  static constexpr std::uint32_t kFormat = 7;
  static constexpr const char* kCall = "ToyState::load_raw_bytes";
  static constexpr const char* kWhat = "a toy state";
  explicit ToyState(ShortConvState conv) : S(5, 0.0f) { convs.emplace_back(std::move(conv)); }
  std::vector<float> S;
  std::vector<model::Copyable<ShortConvState>> convs;
  template <class Self, class F>
  static void parts(Self& s, F&& f) {
    f("S", s.S);
    f("convolutions", s.convs);
  }
  MixerKind kind() const override { return MixerKind::kDeltaRule; }
};

template <class T>
void append(std::vector<unsigned char>& out, const T& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

}  // namespace

TEST_CASE("a declared state saves its frame and parts in order, loads them back, and refuses bad "
          "bytes unchanged", "[model][state]") {
  const RowMatrix taps = RowMatrix::Constant(3, 4, 0.5f);  // 3 channels, kernel 4
  const ShortConvolution conv(taps);
  ToyState s(conv.make_state());
  for (std::size_t i = 0; i < s.S.size(); ++i) s.S[i] = 0.25f * float(i) - 1.0f;
  const RowMatrix x = RowMatrix::Constant(2, 3, 1.5f);
  (void)conv.prefill(s.convs[0], x);
  s.tokens = 2;

  // The record: the format, S, the convolution's own record, the token count.
  std::vector<unsigned char> want;
  append(want, std::uint32_t{7});
  for (const float v : s.S) append(want, v);
  const auto conv_raw = s.convs[0].raw_bytes();
  want.insert(want.end(), conv_raw.begin(), conv_raw.end());
  append(want, std::int64_t{2});
  const auto raw = s.raw_bytes();
  CHECK(raw == want);
  CHECK(s.raw_size() == want.size());
  CHECK(s.n_tokens() == 2);

  ToyState fresh(conv.make_state());
  fresh.load_raw_bytes(raw.data(), raw.size());
  CHECK(fresh.raw_bytes() == raw);
  CHECK(fresh.convs[0].n_tokens() == 2);

  // A clone is its own: stepping it leaves the original's bytes.
  auto copy = s.clone();
  auto& c = static_cast<ToyState&>(*copy);
  c.S[0] = 9.0f;
  (void)conv.prefill(c.convs[0], x);
  CHECK(s.raw_bytes() == raw);
  CHECK(c.convs[0].n_tokens() == 4);

  const auto refused = [&](std::vector<unsigned char> bytes, const char* what) {
    ToyState t(conv.make_state());
    t.load_raw_bytes(raw.data(), raw.size());
    CHECK_THROWS_WITH(t.load_raw_bytes(bytes.data(), bytes.size()), Catch::Contains(what));
    CHECK(t.raw_bytes() == raw);
  };
  refused(std::vector<unsigned char>(raw.begin(), raw.end() - 1), "bytes given, a toy state has");
  auto bad_format = raw;
  bad_format[0] = 6;
  refused(bad_format, "state format 6");
  auto nan = raw;
  const float q = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + 4 + 2 * sizeof(float), &q, sizeof q);
  refused(nan, "the state's S has a non-finite number");
  auto lying = raw;  // the frame says 3 tokens, the convolution has seen 2
  lying.resize(raw.size() - sizeof(std::int64_t));
  append(lying, std::int64_t{3});
  refused(lying, "the state's convolutions has seen 2 tokens, the state 3");

  s.reset();
  CHECK(s.n_tokens() == 0);
  CHECK(s.convs[0].n_tokens() == 0);
  CHECK(std::all_of(s.S.begin(), s.S.end(), [](float v) { return v == 0.0f; }));
}
