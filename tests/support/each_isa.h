// Running a test body under every instruction set this CPU has, and comparing the bytes each
// one gives with the scalar target's. One copy for every test program; the instruction set in
// force before is back in force afterwards, even when the body throws.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "recur/isa.h"

namespace recur::test {

/// Puts the instruction set in force at construction back in force at destruction.
class IsaGuard {
 public:
  IsaGuard() : before_(recur::isa()) {}
  ~IsaGuard() { recur::set_isa(before_); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;

 private:
  std::string before_;
};

/// Runs f(isa) under each available instruction set.
template <class F>
void for_each_isa(const F& f) {
  const IsaGuard guard;
  for (const std::string& isa : recur::available_isas()) {
    recur::set_isa(isa);
    f(isa);
  }
}

/// Runs f() under each available instruction set; the bytes it returned, per set.
template <class F>
std::vector<std::pair<std::string, std::string>> under_each(const F& f) {
  std::vector<std::pair<std::string, std::string>> out;
  for_each_isa([&](const std::string& isa) { out.emplace_back(isa, f()); });
  return out;
}

/// Every set's bytes equal the scalar target's; a failure names the set and the first byte
/// that differs.
inline void require_same_bytes(const std::vector<std::pair<std::string, std::string>>& runs) {
  const std::string* scalar = nullptr;
  for (const auto& [isa, bytes] : runs)
    if (isa == "scalar") scalar = &bytes;
  REQUIRE(scalar != nullptr);
  REQUIRE(!scalar->empty());
  for (const auto& [isa, bytes] : runs) {
    INFO("instruction set " << isa << " against scalar");
    REQUIRE(bytes.size() == scalar->size());
    const auto diff = std::mismatch(bytes.begin(), bytes.end(), scalar->begin());
    const long first = diff.first == bytes.end() ? -1L : long(diff.first - bytes.begin());
    INFO("first differing byte: " << first);
    CHECK(first == -1L);
  }
}

/// under_each() then require_same_bytes().
template <class F>
void require_same_bytes_under_each_isa(const F& f) {
  require_same_bytes(under_each(f));
}

/// Appends n values' bytes to `out`.
template <class T>
void append_bytes(std::string& out, const T* data, std::size_t n) {
  out.append(reinterpret_cast<const char*>(data), n * sizeof(T));
}

}  // namespace recur::test
