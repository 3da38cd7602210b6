// A layer's state declared as its parts: a family lists what its state holds, in the order the
// saved state stores it, and gets clone, reset, sizes, the saved bytes, loading (checked before
// anything changes) and the finiteness check from here, instead of writing each by hand. Its
// float buffers are written and read as the public mixers' states write theirs
// (util/state_buffers.h), and those states are parts here as themselves.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "model/network.h"
#include "recur/error.h"
#include "util/state_buffers.h"

namespace recur::model {

/// A mixer's own state type (ShortConvState, GlaState: copied only by clone()) as a part of a
/// declared state: copying it clones it.
template <class S>
struct Copyable : S {
  explicit Copyable(S s) : S(std::move(s)) {}
  Copyable(const Copyable& other) : S(other.S::clone()) {}
  Copyable(Copyable&&) noexcept = default;
  Copyable& operator=(const Copyable& other) {
    S::operator=(other.S::clone());
    return *this;
  }
  Copyable& operator=(Copyable&&) noexcept = default;
  ~Copyable() = default;
};

/// `states` as parts of a declared state.
template <class S>
std::vector<Copyable<S>> copyable(std::vector<S> states) {
  std::vector<Copyable<S>> out;
  for (auto& s : states) out.emplace_back(std::move(s));
  return out;
}

// What each kind of part does: a float buffer (its floats, checked finite when loaded), a mixer's
// state (its own raw bytes, which carry its token count), or a list of either.
namespace state_part {

inline std::size_t raw_size(const std::vector<float>& v) { return v.size() * sizeof(float); }
inline std::size_t bytes(const std::vector<float>& v) { return v.capacity() * sizeof(float); }
inline void reset(std::vector<float>& v) { std::fill(v.begin(), v.end(), 0.0f); }
inline void write(const std::vector<float>& v, unsigned char*& p) {
  detail::write_buffer(detail::contiguous("", v.data(), v.size()), p);
}
inline void read(std::vector<float>& v, const unsigned char*& p, const char* name,
                 const char* call, std::vector<std::int64_t>&) {
  detail::read_buffer(detail::contiguous(name, v.data(), v.size()), p, call);
}

template <class S>
std::size_t raw_size(const Copyable<S>& s) { return s.raw_size(); }
template <class S>
std::size_t bytes(const Copyable<S>& s) { return s.bytes(); }
template <class S>
void reset(Copyable<S>& s) { s.reset(); }
template <class S>
void write(const Copyable<S>& s, unsigned char*& p) {
  const auto raw = s.raw_bytes();
  std::memcpy(p, raw.data(), raw.size());
  p += raw.size();
}
template <class S>
void read(Copyable<S>& s, const unsigned char*& p, const char*, const char*,
          std::vector<std::int64_t>& tokens) {
  const std::size_t n = s.raw_size();
  s.load_raw_bytes(p, n);
  p += n;
  tokens.push_back(s.n_tokens());
}

template <class S>
std::size_t raw_size(const std::vector<Copyable<S>>& list) {
  std::size_t n = 0;
  for (const auto& s : list) n += raw_size(s);
  return n;
}
template <class S>
std::size_t bytes(const std::vector<Copyable<S>>& list) {
  std::size_t n = 0;
  for (const auto& s : list) n += bytes(s);
  return n;
}
template <class S>
void reset(std::vector<Copyable<S>>& list) {
  for (auto& s : list) reset(s);
}
template <class S>
void write(const std::vector<Copyable<S>>& list, unsigned char*& p) {
  for (const auto& s : list) write(s, p);
}
template <class S>
void read(std::vector<Copyable<S>>& list, const unsigned char*& p, const char* name,
          const char* call, std::vector<std::int64_t>& tokens) {
  for (auto& s : list) read(s, p, name, call, tokens);
}

}  // namespace state_part

/// A LayerState declared as its parts. `Derived` holds them as members (float buffers, Copyable
/// mixer states, lists of either) and lists them in the saved order:
///
///   template <class Self, class F> static void parts(Self& s, F&& f) { f("S", s.S); ... }
///
/// with kFormat, the record's frame (a u32 format first and the token count `tokens` as i64
/// last; 0: no frame, and the mixer states' token count is the state's), kCall and kWhat for
/// messages, and kind(). Every mixer state of a part must have seen the state's tokens.
template <class Derived>
class DeclaredState : public LayerState {
 public:
  std::int64_t tokens = 0;  // a framed state's token count

  std::unique_ptr<LayerState> clone() const override { return std::make_unique<Derived>(self()); }
  void reset() override {
    each(*this, [](const char*, auto& part) { state_part::reset(part); });
    tokens = 0;
  }
  std::int64_t n_tokens() const override {
    if (framed) return tokens;
    std::int64_t n = -1;  // the first mixer state's (no allocation: called every step)
    each(*this, [&](const char*, const auto& part) { first_tokens(part, n); });
    return n < 0 ? 0 : n;
  }
  std::size_t bytes() const override {
    std::size_t n = sizeof(Derived);
    each(*this, [&](const char*, const auto& part) { n += state_part::bytes(part); });
    return n;
  }
  std::size_t raw_size() const override {
    std::size_t n = framed ? sizeof(std::uint32_t) + sizeof(std::int64_t) : 0;
    each(*this, [&](const char*, const auto& part) { n += state_part::raw_size(part); });
    return n;
  }
  // The frame's format, each part's bytes in order, the frame's token count; little-endian hosts.
  std::vector<unsigned char> raw_bytes() const override {
    std::vector<unsigned char> out(raw_size());
    unsigned char* p = out.data();
    if (framed) {
      const std::uint32_t format = Derived::kFormat;
      std::memcpy(p, &format, sizeof format);
      p += sizeof format;
    }
    each(*this, [&](const char*, const auto& part) { state_part::write(part, p); });
    if (framed) std::memcpy(p, &tokens, sizeof tokens);
    return out;
  }
  void load_raw_bytes(const unsigned char* data, std::size_t size) override {
    const char* call = Derived::kCall;
    if (size != raw_size())
      throw FormatError(fmt::format("[{}] {} bytes given, {} has {}", call, size, Derived::kWhat,
                                    raw_size()));
    std::int64_t n = framed ? detail::read_state_frame(data, size, Derived::kFormat, call) : -1;
    // Into a copy first, so that a failure leaves this state as it was.
    Derived incoming = self();
    const unsigned char* p = data + (framed ? sizeof(std::uint32_t) : 0);
    std::vector<std::int64_t> seen;
    each(incoming, [&](const char* name, auto& part) {
      const std::size_t before = seen.size();
      state_part::read(part, p, name, call, seen);
      for (std::size_t i = before; i < seen.size(); ++i) {
        if (n < 0) n = seen[i];
        if (seen[i] != n)
          throw FormatError(fmt::format("[{}] the state's {} has seen {} tokens, the state {}",
                                        call, name, seen[i], n));
      }
    });
    incoming.tokens = framed ? n : 0;
    static_cast<Derived&>(*this) = std::move(incoming);
  }

 private:
  static constexpr bool framed = Derived::kFormat != 0;
  const Derived& self() const { return static_cast<const Derived&>(*this); }

  template <class Self, class F>
  static void each(Self& s, F&& f) {
    using D = std::conditional_t<std::is_const_v<Self>, const Derived, Derived>;
    Derived::parts(static_cast<D&>(s), f);
  }

  static void first_tokens(const std::vector<float>&, std::int64_t&) {}
  template <class S>
  static void first_tokens(const Copyable<S>& s, std::int64_t& n) {
    if (n < 0) n = s.n_tokens();
  }
  template <class S>
  static void first_tokens(const std::vector<Copyable<S>>& list, std::int64_t& n) {
    for (const auto& s : list) first_tokens(s, n);
  }
};

}  // namespace recur::model
