// Reading PyTorch checkpoints (pytorch_model.bin, torch.save since 1.6): a zip archive holding a
// pickle of the state dict and one raw little-endian storage per tensor.
//
// recur never runs a checkpoint's pickle. It reads it with a restricted unpickler that knows the
// few opcodes a state dict needs and four kinds of global (collections.OrderedDict,
// torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter and the torch.*Storage
// types), and only ever builds its own description of each tensor; anything else (os.system,
// builtins.eval, INST, OBJ, NEWOBJ, ...) is a FormatError naming the global or opcode and its
// byte offset. Every tensor is then checked against its storage: the entry exists, its size
// matches, the tensor's extent lies inside it, and its strides are row-major. See
// docs/pytorch-checkpoints.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace recur {

/// How a PyTorch storage holds its elements (torch.float32 ... torch.bool).
enum class TorchDType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

/// "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL" (safetensors' names).
const char* torch_dtype_name(TorchDType dtype);
/// Bytes per element.
int torch_dtype_size(TorchDType dtype);

/// One tensor of a checkpoint: a row-major run of bytes inside one storage.
struct TorchTensorInfo {
  std::string name;
  TorchDType dtype = TorchDType::kF32;
  std::vector<std::int64_t> shape;  ///< empty for a 0-d tensor (one element)
  std::string storage;              ///< the zip entry that holds the storage
  std::uint64_t offset = 0;         ///< byte offset of the first element inside the storage
  std::uint64_t bytes = 0;          ///< elements() * torch_dtype_size(dtype)
  std::int64_t elements() const;
  /// "(512, 2048)"
  std::string shape_string() const;
};

/// The tensors of one pytorch_model.bin, checked at open; their bytes are read on demand.
/// Reads of one checkpoint from several threads are safe (they take turns on the archive).
class TorchCheckpoint {
 public:
  /// Opens and checks `path`. Throws FormatError ("[load_pytorch] <path>: ...") for anything
  /// that is not a well-formed state dict of tensors.
  static TorchCheckpoint open_file(const std::string& path);
  /// The same from bytes in memory; `name` stands for the file in messages.
  static TorchCheckpoint open_buffer(std::string bytes, const std::string& name);

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  /// Throws ArgumentError for a name the checkpoint does not hold.
  const TorchTensorInfo& info(const std::string& name) const;
  const std::map<std::string, TorchTensorInfo>& tensors() const { return tensors_; }
  /// The names in the order the state dict holds them.
  const std::vector<std::string>& names() const { return order_; }
  /// The file (or buffer name) the tensors came from, for messages.
  const std::string& source() const { return source_; }

  /// A tensor's bytes: row-major, little-endian, info(name).bytes of them.
  std::string read_bytes(const std::string& name) const;
  /// A float tensor's elements (F32, F16, BF16) as float32. Throws ArgumentError for another
  /// dtype and NumericError if an element is NaN or infinite.
  std::vector<float> read_f32(const std::string& name) const;

  struct Archive;  // the open zip (libzip stays out of the public headers)

 private:
  std::string source_;
  std::map<std::string, TorchTensorInfo> tensors_;
  std::vector<std::string> order_;
  std::shared_ptr<Archive> archive_;
};

}  // namespace recur
