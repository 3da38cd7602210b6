// The exceptions recur throws at its public boundary. Every message starts with the call's name
// in brackets, then names the argument and the sizes involved, e.g.
//   [LinearAttention::step] q has 63 elements, expected n_heads * d_key = 8 * 8 = 64
#pragma once

#include <stdexcept>
#include <string>

namespace recur {

/// Base of every recur exception. Catch this to handle all of them.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An argument's shape does not match what the call expects.
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// An argument holds NaN or Inf, or a computation would produce them.
class NumericError : public Error {
 public:
  using Error::Error;
};

/// An argument's value is out of range: a chunk size of 0, an unknown name, a bad token id.
class ArgumentError : public Error {
 public:
  using Error::Error;
};

/// A file is missing, truncated, or says something that is not true of itself.
class FormatError : public Error {
 public:
  using Error::Error;
};

}  // namespace recur
