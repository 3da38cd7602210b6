// Reading and writing safetensors files (https://github.com/huggingface/safetensors): an
// 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the data. recur reads F32, F16 and BF16 tensors and hands them out as float32,
// and I8 and U8 tensors (the codes of quantized weights, docs/quantization.md) as their bytes.
//
// Everything the header claims is checked before any data is read: the header length against
// the file size, the JSON, each dtype, that each byte range matches its shape, lies inside the
// file, and that the ranges neither overlap nor leave holes. A bad file gets a FormatError that
// names the file, the tensor and the problem.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "recur/dtype.h"

namespace recur {

/// "(512, 2048)", "(64,)": a shape as messages print it.
std::string shape_string(const std::vector<std::int64_t>& shape);

/// What a header says about one tensor.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::string file;           ///< the file that holds it
  std::uint64_t offset = 0;   ///< absolute byte offset of its data in that file
  std::uint64_t bytes = 0;
  std::int64_t elements() const;
  /// "(512, 2048)"
  std::string shape_string() const;
};

/// The tensors of one safetensors file, or of a sharded checkpoint described by a
/// *.safetensors.index.json. Headers are read and checked at open; data is read on demand.
class TensorStore {
 public:
  /// One .safetensors file.
  static TensorStore open_file(const std::string& path);
  /// A model directory: model.safetensors, or model.safetensors.index.json and its shards.
  static TensorStore open_dir(const std::string& dir);

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  /// Where the tensors came from (a file or a directory), for messages.
  const std::string& source() const { return source_; }

  /// A tensor's elements as float32, row-major. Throws FormatError if the tensor is not F32,
  /// F16 or BF16, if the file changed under us (short read) or an element is NaN or infinite.
  std::vector<float> read(const std::string& name) const;
  /// A tensor's bytes as stored (little-endian, row-major), whatever its dtype: how the codes
  /// and scales of a quantized weight are read. Throws FormatError on a short read.
  std::vector<std::uint8_t> read_bytes(const std::string& name) const;

 private:
  std::string source_;
  std::map<std::string, TensorInfo> tensors_;
};

/// A tensor to write: name, shape, and row-major float32 values (converted to the file's dtype).
struct TensorData {
  std::string name;
  std::vector<std::int64_t> shape;
  const float* values = nullptr;
};

/// Writes one safetensors file with every tensor stored as `dtype`, in the order given.
/// Written to a temporary name and renamed, so a failed write leaves no partial file.
void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       DType dtype, const std::map<std::string, std::string>& metadata = {});

/// A tensor to write as it is stored: `bytes` holds shape's element count times
/// dtype_size(dtype) bytes, little-endian, row-major.
struct StoredTensorData {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  const void* bytes = nullptr;
};

/// Writes one safetensors file whose tensors keep each its own dtype, in the order given; as
/// write_safetensors, through a temporary name.
void write_safetensors_stored(const std::string& path,
                              const std::vector<StoredTensorData>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace recur
