// A state declared as its buffers: a state names the buffers its saved record holds, in the
// record's order, and its record (raw_bytes), loading one (checked, every number finite, before
// anything changes), clone and reset are written once, here. The public mixers' states
// (LinearState, ShortConvState, WindowState, CausalState, GlaState) are declared through
// DeclaredBuffers; the families' layer states (model/declared_state.h) write and read their
// float buffers through write_buffer() and read_buffer().
//
// A record: a u32 format word (when the state's kFormat is not 0), each buffer's rows in turn
// (what lies between rows in memory, a layout's padding, is not saved), then the token count as
// i64; in the host's byte order (little-endian hosts).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "recur/error.h"

namespace recur::detail {

/// One named buffer of a state as its record holds it: `rows` rows of `cols` numbers (T: float
/// or double, const when only read), rows `stride` numbers apart in memory.
template <class T>
struct StateBuffer {
  const char* name;  // in messages: "keys", "S"
  int head;          // the head it belongs to (in messages), or -1
  T* data;
  std::size_t rows, cols, stride;

  std::size_t raw_size() const { return rows * cols * sizeof(T); }
};

/// A (rows, cols) block whose rows lie `stride` numbers apart.
template <class T>
StateBuffer<T> block(const char* name, T* data, std::size_t rows, std::size_t cols,
                     std::size_t stride, int head = -1) {
  return {name, head, data, rows, cols, stride};
}

/// n contiguous numbers.
template <class T>
StateBuffer<T> contiguous(const char* name, T* data, std::size_t n, int head = -1) {
  return block(name, data, 1, n, n, head);
}

/// Appends b's rows at p, advancing p.
template <class T>
void write_buffer(const StateBuffer<T>& b, unsigned char*& p) {
  const std::size_t row = b.cols * sizeof(T);
  if (row == 0) return;
  for (std::size_t r = 0; r < b.rows; ++r, p += row) std::memcpy(p, b.data + r * b.stride, row);
}

/// Reads b's rows from p, advancing p; FormatError naming `call`, the buffer and the place of
/// the first number that is not finite (b then holds what was read).
template <class T>
void read_buffer(const StateBuffer<T>& b, const unsigned char*& p, const char* call) {
  const std::size_t row = b.cols * sizeof(T);
  if (row == 0) return;
  for (std::size_t r = 0; r < b.rows; ++r, p += row) {
    T* dst = b.data + r * b.stride;
    std::memcpy(dst, p, row);
    bool ok = true;
    for (std::size_t c = 0; c < b.cols; ++c) ok &= std::isfinite(dst[c]);
    if (ok) continue;
    std::size_t c = 0;
    while (std::isfinite(dst[c])) ++c;
    const std::string where = b.head < 0 ? "" : fmt::format(" of head {}", b.head);
    const std::string at = b.rows == 1 ? fmt::format("element {}", c)
                                       : fmt::format("row {}, column {}", r, c);
    throw FormatError(fmt::format("[{}] the state's {}{} has a non-finite number ({}) at {}",
                                  call, b.name, where, dst[c], at));
  }
}

/// The token count of a framed record of `size` bytes (at least the frame's) after checking its
/// format word is `format` and the count is not negative; FormatError naming `call` otherwise.
inline std::int64_t read_state_frame(const unsigned char* data, std::size_t size,
                                     std::uint32_t format, const char* call) {
  std::uint32_t given = 0;
  std::memcpy(&given, data, sizeof given);
  if (given != format)
    throw FormatError(fmt::format("[{}] state format {}, this build reads format {}", call, given,
                                  format));
  std::int64_t n = 0;
  std::memcpy(&n, data + size - sizeof n, sizeof n);
  if (n < 0) throw FormatError(fmt::format("[{}] the token count is {}", call, n));
  return n;
}

/// The operations of a state S declared as its buffers. S makes this its friend and declares:
///
///   static constexpr const char* kName;       // "LinearState": messages name S::load_raw_bytes
///   static constexpr std::uint32_t kFormat;   // the record's format word; 0: no word
///   static constexpr bool kGrows;             // whether the record's size follows the token
///                                             // count (then S has raw_size_at(n_tokens))
///   template <class Self, class F>            // f(StateBuffer<T>) for each buffer of s (Self:
///   static void buffers(Self& s, F&& f);      // S or const S), in the record's order
///   S blank(std::int64_t n_tokens) const;     // this shape, every buffer zero, at n_tokens
///   std::int64_t n_tokens_;
struct DeclaredBuffers {
  template <class S>
  static std::size_t raw_size(const S& s) {
    std::size_t n = frame_size<S>();
    S::buffers(s, [&](const auto& b) { n += b.raw_size(); });
    return n;
  }

  template <class S>
  static std::vector<unsigned char> raw_bytes(const S& s) {
    std::vector<unsigned char> out(raw_size(s));
    unsigned char* p = out.data();
    if (S::kFormat != 0) {
      const std::uint32_t format = S::kFormat;
      std::memcpy(p, &format, sizeof format);
      p += sizeof format;
    }
    S::buffers(s, [&](const auto& b) { write_buffer(b, p); });
    std::memcpy(p, &s.n_tokens_, sizeof s.n_tokens_);
    return out;
  }

  /// Restores raw_bytes() of a state of s's shape, into a blank state first: when the bytes are
  /// refused (a size, format, token count or number that is not the shape's), s is unchanged.
  template <class S>
  static void load(S& s, const unsigned char* data, std::size_t size) {
    const std::string call = fmt::format("{}::load_raw_bytes", S::kName);
    const auto refuse_size = [&](std::size_t expected, const std::string& when) {
      throw FormatError(fmt::format("[{}] {} bytes given, a state of this shape{} has {}", call,
                                    size, when, expected));
    };
    if (!S::kGrows && size != raw_size(s)) refuse_size(raw_size(s), "");
    if (size < frame_size<S>()) refuse_size(frame_size<S>(), " (at least)");
    std::int64_t n = 0;
    if (S::kFormat != 0) {
      n = read_state_frame(data, size, S::kFormat, call.c_str());
    } else {
      std::memcpy(&n, data + size - sizeof n, sizeof n);
      if (n < 0) throw FormatError(fmt::format("[{}] the token count is {}", call, n));
    }
    if constexpr (S::kGrows)
      if (size != s.raw_size_at(n)) refuse_size(s.raw_size_at(n), fmt::format(" after {} tokens", n));
    S incoming = s.blank(n);
    const unsigned char* p = data + (S::kFormat != 0 ? sizeof(std::uint32_t) : 0);
    S::buffers(incoming, [&](const auto& b) { read_buffer(b, p, call.c_str()); });
    s = std::move(incoming);
  }

  /// A deep copy of s: its buffers' rows through one array into a blank state.
  template <class S>
  static S clone(const S& s) {
    S copy = s.blank(s.n_tokens_);
    std::vector<unsigned char> rows(raw_size(s));  // the record's size bounds the rows'
    unsigned char* out = rows.data();
    S::buffers(s, [&](const auto& b) { write_buffer(b, out); });
    const unsigned char* in = rows.data();
    S::buffers(copy, [&](const auto& b) { copy_in(b, in); });
    return copy;
  }

  /// s back to the start of a sequence.
  template <class S>
  static void reset(S& s) {
    s = s.blank(0);
  }

 private:
  template <class S>
  static constexpr std::size_t frame_size() {
    return (S::kFormat != 0 ? sizeof(std::uint32_t) : 0) + sizeof(std::int64_t);
  }
  // read_buffer() without the check: the numbers come from a state.
  template <class T>
  static void copy_in(const StateBuffer<T>& b, const unsigned char*& p) {
    const std::size_t row = b.cols * sizeof(T);
    if (row == 0) return;
    for (std::size_t r = 0; r < b.rows; ++r, p += row) std::memcpy(b.data + r * b.stride, p, row);
  }
};

}  // namespace recur::detail
