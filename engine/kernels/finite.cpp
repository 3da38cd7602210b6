#include "kernels/finite.h"

#include "kernels/dispatch.h"

namespace recur::detail {

bool all_finite(const float* data, std::int64_t rows, std::int64_t cols, std::int64_t stride) {
  return kernels::active().all_finite(data, rows, cols, stride);
}

}  // namespace recur::detail
