// What a model family gives the generic decoder: its layer stack, loaded (a Network), each
// layer's per-sequence state behind one small interface (LayerState), and the rows it works in
// (Scratch). The decoder, the batch decoder, saved states and serve see only these; they never
// branch on the family (docs/adding-a-model.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "recur/model.h"

namespace recur::model {

/// One layer's state for one sequence: what its mixer keeps (S and Z, a convolution's past
/// inputs, a window's ring, a KV cache). Fixed in size, except a full softmax layer's cache.
/// Copying is explicit (clone()).
class LayerState {
 public:
  virtual ~LayerState() = default;
  virtual std::unique_ptr<LayerState> clone() const = 0;
  virtual void reset() = 0;
  virtual std::int64_t n_tokens() const = 0;
  /// Bytes held in memory.
  virtual std::size_t bytes() const = 0;
  /// Bytes of raw_bytes().
  virtual std::size_t raw_size() const = 0;
  /// raw_size() after `n_tokens` tokens (differs only for a state that grows).
  virtual std::size_t raw_size_at(std::int64_t n_tokens) const {
    (void)n_tokens;
    return raw_size();
  }
  /// True when the state grows with the sequence (a full softmax layer's KV cache).
  virtual bool grows() const { return false; }
  /// The state in the versioned format's layer record (saved_state.cpp).
  virtual std::vector<unsigned char> raw_bytes() const = 0;
  /// Throws FormatError (the state unchanged) when the bytes are not a state of this shape.
  virtual void load_raw_bytes(const unsigned char* data, std::size_t size) = 0;
  /// What mixes tokens in this layer (Decoder::state_bytes(kind)).
  virtual MixerKind kind() const = 0;
};

namespace traits {
template <class S, class = void>
struct HasGrows : std::false_type {};
template <class S>
struct HasGrows<S, std::void_t<decltype(std::declval<const S&>().grows())>> : std::true_type {};
}  // namespace traits

/// A LayerState holding one mixer's own state type (LinearState, ShortConvState, WindowState,
/// CausalState, ...), which already has every operation the interface asks for.
template <class S>
class MixerState final : public LayerState {
 public:
  MixerState(S state, MixerKind kind) : state_(std::move(state)), kind_(kind) {}
  S& get() { return state_; }
  const S& get() const { return state_; }

  std::unique_ptr<LayerState> clone() const override {
    return std::make_unique<MixerState>(state_.clone(), kind_);
  }
  void reset() override { state_.reset(); }
  std::int64_t n_tokens() const override { return state_.n_tokens(); }
  std::size_t bytes() const override { return state_.bytes(); }
  std::size_t raw_size() const override { return state_.raw_size(); }
  std::size_t raw_size_at(std::int64_t n_tokens) const override {
    if constexpr (traits::HasGrows<S>::value) return state_.raw_size_at(n_tokens);
    (void)n_tokens;
    return state_.raw_size();
  }
  bool grows() const override {
    if constexpr (traits::HasGrows<S>::value) return state_.grows();
    return false;
  }
  std::vector<unsigned char> raw_bytes() const override { return state_.raw_bytes(); }
  void load_raw_bytes(const unsigned char* data, std::size_t size) override {
    state_.load_raw_bytes(data, size);
  }
  MixerKind kind() const override { return kind_; }

 private:
  S state_;
  MixerKind kind_;
};

/// The typed state of layer state `s`, which the network made (a mismatch is a bug in recur).
template <class S>
S& state_of(LayerState& s) {
  return static_cast<MixerState<S>&>(s).get();
}

/// Buffers for up to `cap` rows, never part of a decoder's value. Every family keeps x, the
/// residual stream (cap, hidden), and h, the normed rows the head reads (cap, hidden); each adds
/// its own named buffers.
struct Scratch {
  virtual ~Scratch() = default;
  int cap = 0;
  std::vector<float> x, h;  // (cap, hidden)
  std::vector<float> logits;  // (rows, vocab): filled only when every row's logits are wanted
  /// Bytes held by every buffer.
  virtual std::size_t bytes() const {
    return (x.capacity() + h.capacity() + logits.capacity()) * sizeof(float);
  }
};

/// Sums the capacity of buffers, in bytes.
inline std::size_t buffer_bytes(std::initializer_list<const std::vector<float>*> buffers) {
  std::size_t n = 0;
  for (const auto* b : buffers) n += b->capacity() * sizeof(float);
  return n;
}

/// A non-owning reference to a callable, so that the per-token path allocates nothing.
template <class Signature>
class FunctionRef;
template <class R, class... A>
class FunctionRef<R(A...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit, as a function argument
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, A... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(a...); }) {}
  R operator()(A... a) const { return call_(object_, a...); }

 private:
  void* object_;
  R (*call_)(void*, A...);
};

/// Called by Network::run() where layer `layer` reaches a stage that depends on the sequence:
/// the caller runs Network::run_sequence() for each sequence's rows (one sequence in a Decoder,
/// many in a BatchDecoder), on `threads` threads. May throw (the stack then stops and rethrows).
using Attend = FunctionRef<void(std::size_t layer, int stage, int threads)>;

/// A family's layer stack, loaded: immutable, shared by every sequence and thread. Every stage
/// but the per-sequence ones is a function of one row, so a row's bytes do not depend on which
/// rows share the call (a chunk of one sequence, or one token of each of many).
class Network {
 public:
  virtual ~Network() = default;
  virtual std::size_t n_layers() const = 0;
  /// Layer `layer`'s state for a new sequence.
  virtual std::unique_ptr<LayerState> make_state(std::size_t layer) const = 0;
  /// Buffers for up to `rows` rows.
  virtual std::unique_ptr<Scratch> make_scratch(int rows) const = 0;
  /// Every layer over the scratch's first n rows, whose x holds the tokens' embeddings; leaves
  /// the last layer's output in x. Calls attend() at each per-sequence stage.
  virtual void run(Scratch& s, int n, int threads, Attend attend) const = 0;
  /// Layer `layer`'s stage `stage` for rows [first, first + count) of the scratch, which belong
  /// to one sequence whose state for this layer is `state` (step for one row, prefill for more:
  /// the same bytes).
  virtual void run_sequence(std::size_t layer, int stage, Scratch& s, LayerState& state,
                            int first, int count, int threads) const = 0;
  /// Zeroes what that stage writes for those rows: the rows of a sequence that failed in this
  /// call, so that the rows-wide stages after it see finite numbers.
  virtual void clear_sequence(std::size_t layer, int stage, Scratch& s, int first,
                              int count) const = 0;
  /// Bytes of the layers' weights one decode step reads.
  virtual std::size_t weight_bytes() const = 0;
};

/// Bytes a new sequence's state holds in the layers of `kind` (every layer when kind is null):
/// what Decoder::state_bytes() reports, from the network alone.
inline std::size_t new_state_bytes(const Network& net, const MixerKind* kind = nullptr) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < net.n_layers(); ++i) {
    const auto s = net.make_state(i);
    if (!kind || s->kind() == *kind) n += s->raw_size();
  }
  return n;
}

}  // namespace recur::model
