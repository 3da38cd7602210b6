// Decoder::save and Decoder::load: the saved-state format, written and read back with every
// field checked before anything is replaced.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "model/decoder_impl.h"
#include "recur/error.h"
#include "util/file.h"
#include "util/hash.h"

namespace recur {

namespace {

constexpr char kMagic[8] = {'R', 'E', 'C', 'U', 'R', 'S', 'T', 'A'};
constexpr std::uint32_t kStateVersion = 2;

template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T get(std::string_view in, std::size_t& pos) {
  T v;
  std::memcpy(&v, in.data() + pos, sizeof v);
  pos += sizeof v;
  return v;
}

}  // namespace

std::size_t Decoder::Impl::saved_size(int vocab, std::int64_t tokens) const {
  std::size_t n = kHeaderBytes + sizeof(float) * static_cast<std::size_t>(vocab) +
                  kSessionHeaderBytes + 8;
  for (const auto& s : states) n += 8 + s->raw_size_at(tokens);
  return n;
}

// A saved state (version 2), every number in the machine's byte order:
//   magic "RECURSTA", version u32, layers u32, model fingerprint u64, tokens i64, vocab u32,
//   has_logits u32; per layer: size u64 and LinearState::raw_bytes(); the last logits
//   (vocab floats); the session: flags u32 (1: present, 2: sampler state), sampler state u64,
//   token count u64 and the tokens (i32 each); a checksum u64 of everything before it.
std::string Decoder::save_bytes(const SessionData* session) const {
  check_usable("Decoder::save");
  // The whole size first, so that the string is allocated once (a state is megabytes, and
  // recur serve saves one as each response finishes).
  std::size_t size = sizeof kMagic + 4 + 4 + 8 + 8 + 4 + 4;
  for (const auto& s : impl_->states) size += 8 + s->raw_size();
  size += sizeof(float) * static_cast<std::size_t>(impl_->logits.size()) + 4 + 8 + 8 + 8;
  if (session) size += 4 * session->tokens.size();
  std::string out;
  out.reserve(size);
  out.append(kMagic, sizeof kMagic);
  put(out, kStateVersion);
  put(out, static_cast<std::uint32_t>(impl_->states.size()));
  put(out, model_->fingerprint());
  put(out, impl_->n_tokens);
  put(out, static_cast<std::uint32_t>(model_->config().vocab_size));
  put(out, static_cast<std::uint32_t>(impl_->has_logits ? 1 : 0));
  for (const auto& s : impl_->states) {
    const auto raw = s->raw_bytes();
    put(out, static_cast<std::uint64_t>(raw.size()));
    out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
  }
  out.append(reinterpret_cast<const char*>(impl_->logits.data()),
             sizeof(float) * static_cast<std::size_t>(impl_->logits.size()));
  const std::uint32_t flags = session ? 1u | (session->has_sampler_state ? 2u : 0u) : 0u;
  put(out, flags);
  put(out, session && session->has_sampler_state ? session->sampler_state : std::uint64_t{0});
  put(out, static_cast<std::uint64_t>(session ? session->tokens.size() : 0));
  if (session)
    for (const int t : session->tokens) put(out, static_cast<std::int32_t>(t));
  detail::Hasher hash;
  hash.update(out.data(), out.size());
  put(out, hash.digest());
  return out;
}

void Decoder::save(const std::string& path, const SessionData* session) const {
  detail::write_file_atomically(path, save_bytes(session), "Decoder::save");
}

void Decoder::load(const std::string& path, SessionData* session) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw FormatError(fmt::format("[Decoder::load] {}: cannot read the file: {}", path, ec.message()));
  // A state's size is known from the model, up to the session's tokens: refuse a file that
  // could not be one before reading it whole.
  const std::uint64_t max_tokens = std::uint64_t(1) << 32;
  if (size > impl_->saved_size(model_->config().vocab_size, std::int64_t(max_tokens)) + 4 * max_tokens)
    throw FormatError(fmt::format("[Decoder::load] {}: the file has {} bytes, more than a state "
                                  "of this model can have", path, size));
  const auto bytes = detail::read_file(path);
  if (!bytes) throw FormatError(fmt::format("[Decoder::load] {}: cannot read the file", path));
  load_bytes(*bytes, path, session);
}

void Decoder::load_bytes(std::string_view in, const std::string& source, SessionData* session) {
  const auto fail = [&](const std::string& problem) {
    throw FormatError(fmt::format("[Decoder::load] {}: {}", source, problem));
  };
  const std::size_t size = in.size();
  // A full softmax layer's cache grows with the tokens: the sizes follow from the header's count.
  std::int64_t header_tokens = 0;
  if (size >= Impl::kHeaderBytes) {
    std::size_t at_tokens = 8 + 4 + 4 + 8;
    header_tokens = std::max<std::int64_t>(0, get<std::int64_t>(in, at_tokens));
    header_tokens = std::min<std::int64_t>(header_tokens, std::int64_t(1) << 40);
  }
  const std::size_t fixed = impl_->saved_size(model_->config().vocab_size, header_tokens);
  const std::size_t session_at = fixed - Impl::kSessionHeaderBytes - 8;
  const std::size_t logits_at = session_at - sizeof(float) * static_cast<std::size_t>(model_->config().vocab_size);
  std::vector<std::size_t> layer_bytes;
  for (const auto& s : impl_->states) layer_bytes.push_back(s->raw_size_at(header_tokens));

  if (size < sizeof kMagic + 4) fail(fmt::format("{} bytes is too short for a state file", size));
  if (std::memcmp(in.data(), kMagic, sizeof kMagic) != 0) fail("not a recur state file (bad magic)");
  std::size_t pos = sizeof kMagic;
  const auto version = get<std::uint32_t>(in, pos);
  if (version != kStateVersion)
    fail(fmt::format("state format version {}, this build reads version {}", version, kStateVersion));
  if (size < fixed)
    fail(fmt::format("the file has {} bytes, a state of this model has at least {}: truncated, "
                     "or saved from another model", size, fixed));
  std::size_t at = session_at + 12;
  const auto n_session = get<std::uint64_t>(in, at);
  if (n_session > (size - fixed) / 4 || fixed + 4 * n_session != size)
    fail(fmt::format("the file has {} bytes, a state of this model with {} session tokens has {}: "
                     "truncated, or saved from another model", size, n_session,
                     n_session > (size - fixed) / 4 ? std::string("fewer")
                                                    : std::to_string(fixed + 4 * n_session)));
  detail::Hasher hash;
  hash.update(in.data(), size - 8);
  std::size_t tail = size - 8;
  if (get<std::uint64_t>(in, tail) != hash.digest()) fail("checksum mismatch: the file is corrupt");

  // The checksum only shows that the bytes are as written; what they say is checked next.
  const auto n_layers = get<std::uint32_t>(in, pos);
  const auto fingerprint = get<std::uint64_t>(in, pos);
  if (fingerprint != model_->fingerprint())
    fail(fmt::format("saved from another model (fingerprint {:016x}, this model's is {:016x})",
                     fingerprint, model_->fingerprint()));
  if (n_layers != impl_->states.size())
    fail(fmt::format("{} layers, the model has {}", n_layers, impl_->states.size()));
  const auto n_tokens = get<std::int64_t>(in, pos);
  const auto vocab = get<std::uint32_t>(in, pos);
  const auto has_logits = get<std::uint32_t>(in, pos);
  if (n_tokens < 0) fail(fmt::format("the token count is {}", n_tokens));
  if (vocab != static_cast<std::uint32_t>(model_->config().vocab_size))
    fail(fmt::format("vocab_size {}, the model has {}", vocab, model_->config().vocab_size));
  if (has_logits > 1 || (has_logits == 1) != (n_tokens > 0))
    fail(fmt::format("has_logits is {} after {} tokens", has_logits, n_tokens));
  std::vector<std::unique_ptr<model::LayerState>> states;
  for (std::size_t i = 0; i < impl_->states.size(); ++i) {
    const auto bytes = get<std::uint64_t>(in, pos);
    if (bytes != layer_bytes[i]) fail(fmt::format("layer {} holds {} bytes, expected {}", i, bytes, layer_bytes[i]));
    std::unique_ptr<model::LayerState> s = model::impl_of(*model_).network->make_state(i);
    try {
      s->load_raw_bytes(reinterpret_cast<const unsigned char*>(in.data() + pos), layer_bytes[i]);
    } catch (const FormatError& e) {
      fail(fmt::format("layer {}: {}", i, e.what()));
    }
    if (s->n_tokens() != n_tokens)
      fail(fmt::format("layer {} has seen {} tokens, the header says {}", i, s->n_tokens(), n_tokens));
    pos += layer_bytes[i];
    states.push_back(std::move(s));
  }
  Eigen::VectorXf logits(model_->config().vocab_size);
  std::memcpy(logits.data(), in.data() + logits_at, sizeof(float) * static_cast<std::size_t>(logits.size()));
  if (!logits.allFinite()) fail("the saved logits are not finite");
  pos = session_at;
  const auto flags = get<std::uint32_t>(in, pos);
  const auto sampler_state = get<std::uint64_t>(in, pos);
  pos += 8;
  if (flags > 3 || (flags == 0 && (sampler_state != 0 || n_session != 0)) || (flags == 1 && sampler_state != 0))
    fail(fmt::format("the session's flags ({}) do not match its contents", flags));
  SessionData loaded;
  loaded.has_sampler_state = (flags & 2u) != 0;
  loaded.sampler_state = sampler_state;
  loaded.tokens.resize(static_cast<std::size_t>(n_session));
  const int V = model_->config().vocab_size;
  for (std::size_t i = 0; i < loaded.tokens.size(); ++i) {
    const auto t = get<std::int32_t>(in, pos);
    if (t < 0 || t >= V)
      fail(fmt::format("session token {} is {}, expected 0 to vocab_size - 1 = {}", i, t, V - 1));
    loaded.tokens[i] = t;
  }
  // Everything checked: commit.
  impl_->states = std::move(states);
  impl_->n_tokens = n_tokens;
  impl_->has_logits = has_logits == 1;
  impl_->logits = std::move(logits);
  impl_->broken.clear();
  if (session) *session = std::move(loaded);
}

}  // namespace recur
