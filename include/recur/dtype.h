// How a tensor's elements are stored: the dtypes of checkpoint files, which the model keeps its
// matrices in (so that decode reads 16-bit weights as 16 bits) and the kernels multiply.
#pragma once

#include <cstdint>
#include <string>

namespace recur {

/// How a tensor's elements are stored in a file. The integer types hold the codes of quantized
/// weights; they are never widened to float.
/// kI64 is read only as bytes: a trainer's counters (torchmetrics' int64 buffers), which a
/// model leaves out by name; no weight of recur's is I64.
enum class DType { kF32, kF16, kBF16, kI8, kU8, kI64 };

/// "F32", "F16", "BF16", "I8", "U8", "I64" (the names the format uses).
const char* dtype_name(DType dtype);
/// Bytes per element.
int dtype_size(DType dtype);
/// True for F32, F16 and BF16: what TensorStore::read() widens to float32.
bool is_float_dtype(DType dtype);
/// Parses "F32"/"F16"/"BF16" (and the lower-case forms): the dtypes a model's float tensors may
/// be stored as. Throws ArgumentError otherwise (I8 and U8 included).
DType parse_dtype(const std::string& name);


/// float32 <-> the 16-bit formats, rounding to nearest even.
std::uint16_t float_to_bf16(float x);
float bf16_to_float(std::uint16_t x);
std::uint16_t float_to_f16(float x);
float f16_to_float(std::uint16_t x);

}  // namespace recur
