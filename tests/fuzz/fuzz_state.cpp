// Saved decoder states (Decoder::load_bytes, what load() runs on a file's bytes) for a small
// fixed model. Each input is tried as it is and again with its checksum recomputed, so that the
// checks behind the checksum (counts, finiteness, the session) are reached too. A state that
// loads must leave a decoder that can step. With RECUR_FUZZ_SEED_OUT
// set, a valid state of this model (with a session) is written there first, as a seed.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "recur/error.h"
#include "model/random_weights.h"
#include "models/linear/linear.h"
#include "recur/model.h"
#include "util/hash.h"

namespace {

std::shared_ptr<const recur::Model> g_model;

recur::ModelConfig tiny() {
  recur::ModelConfig c;
  c.vocab_size = 40;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_heads = 2;
  recur::models::linear::edit(c).feature_map = recur::models::linear::ModelFeatureMap::kElu;
  recur::models::linear::edit(c).norm_feature_map = true;
  c.intermediate_size = 32;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto c = tiny();
  g_model = recur::Model::from_weights(c, recur::RandomWeights(c, 1));
  if (const char* out = std::getenv("RECUR_FUZZ_SEED_OUT")) {
    recur::Decoder dec(g_model, {4, 1});
    dec.prefill({1, 2, 3, 4, 5});
    recur::SessionData session;
    session.tokens = {1, 2, 3, 4, 5};
    session.has_sampler_state = true;
    session.sampler_state = 42;
    std::ofstream(out, std::ios::binary) << dec.save_bytes(&session);
  }
  return 0;
}

namespace {

void try_load(std::string_view bytes) {
  recur::Decoder dec(g_model, {4, 1});
  recur::SessionData session;
  try {
    dec.load_bytes(bytes, "fuzz.state", &session);
  } catch (const recur::FormatError&) {
    return;  // refused, as it should be; any other exception escapes and is a finding
  }
  // Accepted: the decoder must work from here, unless the state's sums overflow on the way.
  try {
    dec.step(1);
  } catch (const recur::NumericError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try_load(bytes);
  if (size >= 8) {
    recur::detail::Hasher hash;
    hash.update(bytes.data(), size - 8);
    const std::uint64_t d = hash.digest();
    std::memcpy(bytes.data() + size - 8, &d, 8);
    try_load(bytes);
  }
  return 0;
}
