// A 64-bit non-cryptographic hash for fingerprints and checksums: four independent
// multiply-rotate lanes over 8-byte little-endian words, then a final mix. It detects corruption
// and mismatched files; it is not a defence against a deliberate forgery.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace recur::detail {

class Hasher {
 public:
  void update(const void* data, std::size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += size;
    while (size > 0) {
      if (fill_ == 0) {  // whole blocks straight from the input: the same rounds, no copy
        for (; size >= sizeof buf_; p += sizeof buf_, size -= sizeof buf_) block(p);
        if (size == 0) break;
      }
      const std::size_t take = std::min(size, sizeof buf_ - fill_);
      std::memcpy(buf_ + fill_, p, take);
      fill_ += take;
      p += take;
      size -= take;
      if (fill_ == sizeof buf_) {
        block(buf_);
        fill_ = 0;
      }
    }
  }
  template <class T>
  void update_value(const T& v) { update(&v, sizeof v); }

  std::uint64_t digest() const {
    std::uint64_t h = rotl(lane_[0], 1) + rotl(lane_[1], 7) + rotl(lane_[2], 12) + rotl(lane_[3], 18);
    for (std::size_t i = 0; i < fill_; ++i) h = (h ^ buf_[i]) * kP1;
    h ^= total_;
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    h ^= h >> 32;
    return h;
  }

 private:
  static constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull;
  static constexpr std::uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
  static constexpr std::uint64_t kP3 = 0x165667B19E3779F9ull;
  static std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  void block(const unsigned char* b) {
    for (int i = 0; i < 4; ++i) {
      std::uint64_t w;
      std::memcpy(&w, b + 8 * i, 8);
      lane_[i] = round(lane_[i], w);
    }
  }
  static std::uint64_t round(std::uint64_t acc, std::uint64_t w) {
    acc += w * kP2;
    acc = rotl(acc, 31);
    return acc * kP1;
  }
  std::uint64_t lane_[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  unsigned char buf_[32] = {};
  std::size_t fill_ = 0;
  std::uint64_t total_ = 0;
};

}  // namespace recur::detail
