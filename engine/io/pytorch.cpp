// PyTorch checkpoints: libzip for the archive, and a restricted unpickler for data.pkl that
// never calls anything. torch.load's unpickler imports and calls whatever globals a pickle
// names; this one knows four kinds of global and, for REDUCE, builds its own description of
// what torch would have built. The pickle is read once, front to back, without recursion: the
// limits below bound its memory and nesting however it is written.
#include "recur/pytorch.h"

#include <fmt/format.h>
#include <zip.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "io/pytorch.h"
#include "recur/error.h"
#include "recur/safetensors.h"

namespace recur {

const char* torch_dtype_name(TorchDType dtype) {
  switch (dtype) {
    case TorchDType::kF32: return "F32";
    case TorchDType::kF16: return "F16";
    case TorchDType::kBF16: return "BF16";
    case TorchDType::kF64: return "F64";
    case TorchDType::kI64: return "I64";
    case TorchDType::kI32: return "I32";
    case TorchDType::kI16: return "I16";
    case TorchDType::kI8: return "I8";
    case TorchDType::kU8: return "U8";
    case TorchDType::kBool: return "BOOL";
  }
  return "?";
}

int torch_dtype_size(TorchDType dtype) {
  switch (dtype) {
    case TorchDType::kF64:
    case TorchDType::kI64: return 8;
    case TorchDType::kF32:
    case TorchDType::kI32: return 4;
    case TorchDType::kF16:
    case TorchDType::kBF16:
    case TorchDType::kI16: return 2;
    case TorchDType::kI8:
    case TorchDType::kU8:
    case TorchDType::kBool: return 1;
  }
  return 1;
}

std::int64_t TorchTensorInfo::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;  // checked at open: fits, and matches `bytes`
  return n;
}

std::string TorchTensorInfo::shape_string() const { return recur::shape_string(shape); }

namespace {

constexpr const char* kCall = "load_pytorch";
// A state dict's pickle takes some 150 bytes a tensor: 16 MiB is room for 100 000 tensors.
constexpr std::size_t kMaxPickleBytes = std::size_t(16) << 20;
// Each opcode makes at most one object; a real pickle makes about 20 a tensor.
constexpr std::size_t kMaxObjects = std::size_t(1) << 21;
// torch's pickles nest MARKs three deep and containers four deep.
constexpr std::size_t kMaxMarks = 64;
constexpr std::uint32_t kMaxDepth = 64;
constexpr std::size_t kMaxDims = 64;
constexpr std::size_t kMaxGlobalName = 256;
constexpr std::uint64_t kMaxEntries = 1u << 20;
// Deflate cannot expand data by more than about 1032 to 1.
constexpr std::uint64_t kMaxDeflateRatio = 1032;
constexpr const char* kNoCode =
    "is not allowed in a state dict (recur reads tensors only, and never runs code from a "
    "checkpoint)";

// Text from a hostile file, fit for a message: non-printable bytes as \xNN, at most 100 bytes.
std::string printable(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 100; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') out += static_cast<char>(c);
    else out += fmt::format("\\x{:02x}", c);
  }
  if (s.size() > 100) out += "...";
  return out;
}

template <class... Args>
[[noreturn]] void fail(const std::string& file, fmt::format_string<Args...> f, Args&&... args) {
  throw FormatError(
      fmt::format("[{}] {}: {}", kCall, file, fmt::format(f, std::forward<Args>(args)...)));
}

// The pickle opcodes by byte, for messages (every opcode of protocols 0 to 5).
const char* opcode_name(unsigned char op) {
  switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}
bool checked_add(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_add_overflow(a, b, &out);
}

std::string dims_string(const std::vector<std::int64_t>& v) { return shape_string(v); }

// ---- the unpickler ---------------------------------------------------------------------------

using Ref = std::uint32_t;

enum class Kind : std::uint8_t {
  kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor
};

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "a bool";
    case Kind::kInt: return "an int";
    case Kind::kFloat: return "a float";
    case Kind::kString: return "a string";
    case Kind::kTuple: return "a tuple";
    case Kind::kList: return "a list";
    case Kind::kDict: return "a dict";
    case Kind::kGlobal: return "a global";
    case Kind::kStorage: return "a storage";
    case Kind::kTensor: return "a tensor";
  }
  return "?";
}

// The only globals a pickle may name.
enum class Global : std::uint8_t { kOrderedDict, kRebuildTensor, kRebuildParameter, kStorageType };

struct Object {
  Kind kind = Kind::kNone;
  Global global = Global::kOrderedDict;  // kGlobal
  TorchDType dtype = TorchDType::kF32;   // kGlobal kStorageType
  std::uint32_t depth = 0;               // containers around the deepest thing inside
  std::int64_t integer = 0;              // kBool, kInt; kStorage, kTensor: their index
  double number = 0.0;                   // kFloat
  std::string text;                      // kString; kGlobal: "module.name"
  std::vector<Ref> items;                // kTuple, kList; kDict: key, value, key, value, ...
};

struct Storage {
  std::string entry;
  TorchDType dtype;
  std::uint64_t numel;
};

struct Tensor {
  std::size_t storage;
  std::int64_t offset;
  std::vector<std::int64_t> size, stride;
  std::size_t at;  // the REDUCE that made it
};

class Unpickler {
 public:
  Unpickler(std::string_view pickle, const std::string& file, const std::string& entry,
            const std::string& data_prefix, const detail::TorchEntrySize& entry_size)
      : p_(pickle), file_(file), entry_(entry), prefix_(data_prefix), entry_size_(entry_size) {}

  std::vector<TorchTensorInfo> run();

 private:
  template <class... Args>
  [[noreturn]] void fail_at(std::size_t at, fmt::format_string<Args...> f, Args&&... args) const {
    fail(file_, "{} offset {}: {}", entry_, at, fmt::format(f, std::forward<Args>(args)...));
  }

  const unsigned char* take(std::size_t n) {
    if (n > p_.size() - pos_)
      fail_at(op_at_, "{} needs {} bytes, only {} are left in the pickle", opcode_name(op_), n,
              p_.size() - pos_);
    const auto* out = reinterpret_cast<const unsigned char*>(p_.data()) + pos_;
    pos_ += n;
    return out;
  }
  std::uint64_t take_le(std::size_t n) {
    const unsigned char* b = take(n);
    std::uint64_t x = 0;
    for (std::size_t i = n; i-- > 0;) x = (x << 8) | b[i];
    return x;
  }

  Ref make(Object o) {
    if (objects_.size() >= kMaxObjects)
      fail_at(op_at_, "the pickle makes more than {} objects", kMaxObjects);
    objects_.push_back(std::move(o));
    return static_cast<Ref>(objects_.size() - 1);
  }
  Ref make_kind(Kind kind) {
    Object o;
    o.kind = kind;
    return make(std::move(o));
  }
  Ref make_int(std::int64_t v, Kind kind = Kind::kInt) {
    Object o;
    o.kind = kind;
    o.integer = v;
    return make(std::move(o));
  }
  Object& at(Ref r) { return objects_[r]; }

  std::size_t frame_base() const { return marks_.empty() ? 0 : marks_.back(); }
  void need(std::size_t n) const {
    const std::size_t have = stack_.size() - frame_base();
    if (have < n)
      fail_at(op_at_, "stack underflow: {} needs {} value{}, {} {} there{}", opcode_name(op_), n,
              n == 1 ? "" : "s", have, have == 1 ? "is" : "are",
              marks_.empty() ? "" : " (since the last MARK)");
  }
  Ref pop() {
    need(1);
    const Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  Ref& top() {
    need(1);
    return stack_.back();
  }
  void push(Ref r) { stack_.push_back(r); }
  // The values since the last MARK, and the MARK itself, off the stack.
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) fail_at(op_at_, "{} without a MARK before it", opcode_name(op_));
    const std::size_t base = marks_.back();
    marks_.pop_back();
    std::vector<Ref> items(stack_.begin() + static_cast<std::ptrdiff_t>(base), stack_.end());
    stack_.resize(base);
    return items;
  }

  void nest(Ref container, Ref item) {
    const std::uint32_t d = at(item).depth + 1;
    if (d > kMaxDepth)
      fail_at(op_at_, "containers nest deeper than {} levels (a state dict needs 4)", kMaxDepth);
    if (d > at(container).depth) at(container).depth = d;
  }
  Ref make_tuple(std::vector<Ref> items) {
    Object o;
    o.kind = Kind::kTuple;
    const Ref r = make(std::move(o));
    for (Ref item : items) nest(r, item);
    at(r).items = std::move(items);
    return r;
  }

  std::string take_line() {
    const std::size_t end = p_.find('\n', pos_);
    if (end == std::string_view::npos || end - pos_ > kMaxGlobalName)
      fail_at(op_at_, "GLOBAL's name is not a line of at most {} bytes", kMaxGlobalName);
    std::string s(p_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  Ref make_string(std::uint64_t n) {
    if (n > p_.size() - pos_)
      fail_at(op_at_, "{} claims {} bytes, only {} are left in the pickle", opcode_name(op_), n,
              p_.size() - pos_);
    Object o;
    o.kind = Kind::kString;
    o.text.assign(p_.substr(pos_, static_cast<std::size_t>(n)));
    pos_ += static_cast<std::size_t>(n);
    return make(std::move(o));
  }

  Ref global(const std::string& module, const std::string& name);
  void reduce();
  void persistent_id();
  void set_items(Ref dict, const std::vector<Ref>& items);
  void append(Ref list, const std::vector<Ref>& items);
  void memo_put(std::uint64_t index);
  void memo_get(std::uint64_t index);
  std::int64_t int_arg(Ref r, const char* what) {
    if (at(r).kind != Kind::kInt)
      fail_at(op_at_, "_rebuild_tensor_v2's {} is {}, not an int", what, kind_name(at(r).kind));
    return at(r).integer;
  }
  std::vector<std::int64_t> ints_arg(Ref r, const char* what);
  TorchTensorInfo finish(const std::string& name, const Tensor& t) const;

  std::string_view p_;
  const std::string& file_;
  const std::string& entry_;
  const std::string& prefix_;
  const detail::TorchEntrySize& entry_size_;
  std::size_t pos_ = 0;
  std::size_t op_at_ = 0;
  unsigned char op_ = 0;
  std::vector<Object> objects_;
  std::vector<Ref> stack_;
  std::vector<std::size_t> marks_;  // the stack's size at each open MARK
  std::unordered_map<std::uint64_t, Ref> memo_;
  std::unordered_map<Ref, std::unordered_set<std::string>> dict_keys_;
  std::vector<Storage> storages_;
  std::unordered_map<std::string, std::size_t> storage_by_key_;
  std::vector<Tensor> tensors_;
};

Ref Unpickler::global(const std::string& module, const std::string& name) {
  static const std::pair<const char*, TorchDType> kStorages[] = {
      {"FloatStorage", TorchDType::kF32}, {"HalfStorage", TorchDType::kF16},
      {"BFloat16Storage", TorchDType::kBF16}, {"DoubleStorage", TorchDType::kF64},
      {"LongStorage", TorchDType::kI64}, {"IntStorage", TorchDType::kI32},
      {"ShortStorage", TorchDType::kI16}, {"CharStorage", TorchDType::kI8},
      {"ByteStorage", TorchDType::kU8}, {"BoolStorage", TorchDType::kBool}};
  Object o;
  o.kind = Kind::kGlobal;
  o.text = module + "." + name;
  bool known = false;
  if (module == "collections" && name == "OrderedDict") {
    o.global = Global::kOrderedDict;
    known = true;
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    o.global = Global::kRebuildTensor;
    known = true;
  } else if (module == "torch._utils" && name == "_rebuild_parameter") {
    o.global = Global::kRebuildParameter;
    known = true;
  } else if (module == "torch") {
    for (const auto& [storage, dtype] : kStorages)
      if (name == storage) {
        o.global = Global::kStorageType;
        o.dtype = dtype;
        known = true;
      }
  }
  if (!known) fail_at(op_at_, "global '{}' {}", printable(o.text), kNoCode);
  return make(std::move(o));
}

std::vector<std::int64_t> Unpickler::ints_arg(Ref r, const char* what) {
  const Object& o = at(r);
  if (o.kind != Kind::kTuple)
    fail_at(op_at_, "_rebuild_tensor_v2's {} is {}, not a tuple", what, kind_name(o.kind));
  if (o.items.size() > kMaxDims)
    fail_at(op_at_, "_rebuild_tensor_v2's {} has {} dimensions, more than {}", what,
            o.items.size(), kMaxDims);
  std::vector<std::int64_t> out;
  for (Ref item : o.items) {
    if (at(item).kind != Kind::kInt)
      fail_at(op_at_, "_rebuild_tensor_v2's {} holds {}, not an int", what,
              kind_name(at(item).kind));
    out.push_back(at(item).integer);
  }
  return out;
}

// REDUCE calls nothing: for each allowed global it builds what recur needs to know of the
// result, after checking the arguments are exactly what torch writes.
void Unpickler::reduce() {
  const Ref args_ref = pop();
  const Ref fn_ref = pop();
  const Object& fn = at(fn_ref);
  if (fn.kind != Kind::kGlobal)
    fail_at(op_at_, "REDUCE calls {}, which is not one of the allowed globals", kind_name(fn.kind));
  const Object& args = at(args_ref);
  if (args.kind != Kind::kTuple)
    fail_at(op_at_, "REDUCE's arguments to {} are {}, not a tuple", fn.text, kind_name(args.kind));
  const std::vector<Ref> a = args.items;  // a copy: make() below may move the objects
  switch (fn.global) {
    case Global::kOrderedDict: {
      if (!a.empty())
        fail_at(op_at_, "collections.OrderedDict gets {} arguments; a state dict's gets none",
                a.size());
      push(make_kind(Kind::kDict));
      return;
    }
    case Global::kRebuildParameter: {
      // _rebuild_parameter(data, requires_grad, backward_hooks): a Parameter is its tensor.
      if (a.size() != 3 || at(a[0]).kind != Kind::kTensor || at(a[1]).kind != Kind::kBool ||
          at(a[2]).kind != Kind::kDict)
        fail_at(op_at_,
                "torch._utils._rebuild_parameter takes (tensor, bool, OrderedDict), not {} "
                "arguments starting with {}",
                a.size(), a.empty() ? "nothing" : kind_name(at(a[0]).kind));
      push(a[0]);
      return;
    }
    case Global::kStorageType:
      fail_at(op_at_, "REDUCE calls {}: a storage type is only a persistent id's tag", fn.text);
    case Global::kRebuildTensor: break;
  }
  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks
  // [, metadata]): torch 2 adds the metadata dict only when it is not empty.
  if (a.size() != 6 && a.size() != 7)
    fail_at(op_at_, "torch._utils._rebuild_tensor_v2 gets {} arguments, expected 6", a.size());
  if (at(a[0]).kind != Kind::kStorage)
    fail_at(op_at_, "_rebuild_tensor_v2's storage is {}, not a persistent id's storage",
            kind_name(at(a[0]).kind));
  Tensor t;
  t.storage = static_cast<std::size_t>(at(a[0]).integer);
  t.offset = int_arg(a[1], "storage_offset");
  t.size = ints_arg(a[2], "size");
  t.stride = ints_arg(a[3], "stride");
  t.at = op_at_;
  if (t.size.size() != t.stride.size())
    fail_at(op_at_, "_rebuild_tensor_v2's size {} and stride {} differ in length",
            dims_string(t.size), dims_string(t.stride));
  if (at(a[4]).kind != Kind::kBool)
    fail_at(op_at_, "_rebuild_tensor_v2's requires_grad is {}, not a bool",
            kind_name(at(a[4]).kind));
  if (at(a[5]).kind != Kind::kDict || !at(a[5]).items.empty())
    fail_at(op_at_, "_rebuild_tensor_v2's backward_hooks are {}, not an empty OrderedDict",
            kind_name(at(a[5]).kind));
  if (a.size() == 7 && (at(a[6]).kind != Kind::kDict || !at(a[6]).items.empty()))
    fail_at(op_at_, "_rebuild_tensor_v2's metadata is {}, not an empty dict",
            kind_name(at(a[6]).kind));
  tensors_.push_back(std::move(t));
  push(make_int(static_cast<std::int64_t>(tensors_.size() - 1), Kind::kTensor));
}

// BINPERSID: ('storage', torch.<T>Storage, key, location, numel) names the entry data/<key>.
void Unpickler::persistent_id() {
  const Object& pid = at(pop());
  if (pid.kind != Kind::kTuple || pid.items.size() != 5)
    fail_at(op_at_, "a persistent id is {}{}, not ('storage', type, key, location, numel)",
            kind_name(pid.kind),
            pid.kind == Kind::kTuple ? fmt::format(" of {} items", pid.items.size()) : "");
  const Object& tag = at(pid.items[0]);
  const Object& type = at(pid.items[1]);
  const Object& key = at(pid.items[2]);
  const Object& location = at(pid.items[3]);
  const Object& numel = at(pid.items[4]);
  if (tag.kind != Kind::kString || tag.text != "storage")
    fail_at(op_at_, "a persistent id's tag is {}, not 'storage'",
            tag.kind == Kind::kString ? "'" + printable(tag.text) + "'" : kind_name(tag.kind));
  if (type.kind != Kind::kGlobal || type.global != Global::kStorageType)
    fail_at(op_at_, "a persistent id's storage type is {}, not one of torch's storage types",
            type.kind == Kind::kGlobal ? type.text : kind_name(type.kind));
  if (key.kind != Kind::kString || location.kind != Kind::kString)
    fail_at(op_at_, "a persistent id's key and location are {} and {}, not strings",
            kind_name(key.kind), kind_name(location.kind));
  if (numel.kind != Kind::kInt || numel.integer < 0)
    fail_at(op_at_, "storage '{}' has {} elements", printable(key.text),
            numel.kind == Kind::kInt ? fmt::format("{}", numel.integer) : kind_name(numel.kind));
  const auto n = static_cast<std::uint64_t>(numel.integer);
  const int elsize = torch_dtype_size(type.dtype);
  std::uint64_t bytes = 0;
  if (!checked_mul(n, static_cast<std::uint64_t>(elsize), bytes))
    fail_at(op_at_, "storage '{}': {} elements of {} bytes overflow 64 bits", printable(key.text),
            n, elsize);

  std::size_t index;
  const auto found = storage_by_key_.find(key.text);
  if (found != storage_by_key_.end()) {
    const Storage& s = storages_[found->second];
    if (s.dtype != type.dtype || s.numel != n)
      fail_at(op_at_, "storage '{}' was {} of {} elements, now {} of {}", printable(key.text),
              torch_dtype_name(s.dtype), s.numel, torch_dtype_name(type.dtype), n);
    index = found->second;
  } else {
    const std::string entry = prefix_ + key.text;
    const std::optional<std::uint64_t> size = entry_size_(entry);
    if (!size)
      fail_at(op_at_, "storage '{}' ({}) is not in the archive", printable(key.text),
              printable(entry));
    if (*size != bytes)
      fail_at(op_at_, "storage '{}' ({}) has {} bytes, but {} elements of {} take {}",
              printable(key.text), printable(entry), *size, n, torch_dtype_name(type.dtype), bytes);
    storages_.push_back(Storage{entry, type.dtype, n});
    index = storages_.size() - 1;
    storage_by_key_.emplace(key.text, index);
  }
  push(make_int(static_cast<std::int64_t>(index), Kind::kStorage));
}

void Unpickler::set_items(Ref dict, const std::vector<Ref>& items) {
  if (at(dict).kind != Kind::kDict)
    fail_at(op_at_, "{} on {}, not a dict", opcode_name(op_), kind_name(at(dict).kind));
  if (items.size() % 2 != 0)
    fail_at(op_at_, "SETITEMS with {} values, not key-value pairs", items.size());
  auto& keys = dict_keys_[dict];
  for (std::size_t i = 0; i < items.size(); i += 2) {
    const Object& key = at(items[i]);
    if (key.kind != Kind::kString)
      fail_at(op_at_, "a dict key is {}; a state dict's keys are strings", kind_name(key.kind));
    if (!keys.insert(key.text).second)
      fail_at(op_at_, "the name '{}' appears twice", printable(key.text));
    nest(dict, items[i + 1]);
    at(dict).items.push_back(items[i]);
    at(dict).items.push_back(items[i + 1]);
  }
}

void Unpickler::append(Ref list, const std::vector<Ref>& items) {
  if (at(list).kind != Kind::kList)
    fail_at(op_at_, "{} on {}, not a list", opcode_name(op_), kind_name(at(list).kind));
  for (Ref item : items) {
    nest(list, item);
    at(list).items.push_back(item);
  }
}

void Unpickler::memo_put(std::uint64_t index) {
  const Ref r = top();
  memo_[index] = r;
}

void Unpickler::memo_get(std::uint64_t index) {
  const auto found = memo_.find(index);
  if (found == memo_.end())
    fail_at(op_at_, "{} of memo slot {}, which is empty", opcode_name(op_), index);
  push(found->second);
}

std::vector<TorchTensorInfo> Unpickler::run() {
  if (p_.size() > kMaxPickleBytes)
    fail(file_, "{} has {} bytes, more than the limit of {}", entry_, p_.size(), kMaxPickleBytes);
  if (p_.empty()) fail(file_, "{} is empty", entry_);
  bool stopped = false;
  while (!stopped) {
    if (pos_ >= p_.size())
      fail_at(pos_, "the pickle ends without STOP");
    op_at_ = pos_;
    op_ = static_cast<unsigned char>(p_[pos_++]);
    switch (op_) {
      case 0x80: {  // PROTO
        const std::uint64_t v = take_le(1);
        if (v < 2 || v > 5) fail_at(op_at_, "pickle protocol {} (torch.save writes 2)", v);
        break;
      }
      case 0x95: {  // FRAME: a hint for buffered reading, which a whole pickle in memory needs not
        const std::uint64_t n = take_le(8);
        if (n > p_.size() - pos_)
          fail_at(op_at_, "FRAME of {} bytes, only {} are left", n, p_.size() - pos_);
        break;
      }
      case '}': push(make_kind(Kind::kDict)); break;
      case ']': push(make_kind(Kind::kList)); break;
      case ')': push(make_tuple({})); break;
      case '(':
        if (marks_.size() >= kMaxMarks)
          fail_at(op_at_, "MARKs nest deeper than {} levels (a state dict needs 3)", kMaxMarks);
        marks_.push_back(stack_.size());
        break;
      case 'X': push(make_string(take_le(4))); break;
      case 0x8c: push(make_string(take_le(1))); break;
      case 0x8d: push(make_string(take_le(8))); break;
      case 'J': {
        const auto u = static_cast<std::uint32_t>(take_le(4));
        std::int32_t v;
        std::memcpy(&v, &u, sizeof v);
        push(make_int(v));
        break;
      }
      case 'K': push(make_int(static_cast<std::int64_t>(take_le(1)))); break;
      case 'M': push(make_int(static_cast<std::int64_t>(take_le(2)))); break;
      case 0x8a: {  // LONG1: n bytes, little-endian two's complement
        const std::uint64_t n = take_le(1);
        if (n > 8) fail_at(op_at_, "LONG1 of {} bytes: a state dict's integers fit 64 bits", n);
        std::uint64_t u = take_le(static_cast<std::size_t>(n));
        if (n > 0 && n < 8 && (u >> (8 * n - 1)) != 0) u |= ~std::uint64_t(0) << (8 * n);  // sign
        std::int64_t v;
        std::memcpy(&v, &u, sizeof v);
        push(make_int(v));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian
        const unsigned char* b = take(8);
        std::uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u = (u << 8) | b[i];
        Object o;
        o.kind = Kind::kFloat;
        std::memcpy(&o.number, &u, sizeof u);
        push(make(std::move(o)));
        break;
      }
      case 0x88: push(make_int(1, Kind::kBool)); break;
      case 0x89: push(make_int(0, Kind::kBool)); break;
      case 'N': push(make_kind(Kind::kNone)); break;
      case 't': push(make_tuple(pop_mark())); break;
      case 0x85: {
        const Ref a = pop();
        push(make_tuple({a}));
        break;
      }
      case 0x86: {
        need(2);
        const Ref b = pop(), a = pop();
        push(make_tuple({a, b}));
        break;
      }
      case 0x87: {
        need(3);
        const Ref c = pop(), b = pop(), a = pop();
        push(make_tuple({a, b, c}));
        break;
      }
      case 's': {
        need(3);
        const Ref value = pop(), key = pop();
        set_items(top(), {key, value});
        break;
      }
      case 'u': {
        const std::vector<Ref> items = pop_mark();
        set_items(top(), items);
        break;
      }
      case 'a': {
        need(2);
        const Ref item = pop();
        append(top(), {item});
        break;
      }
      case 'e': {
        const std::vector<Ref> items = pop_mark();
        append(top(), items);
        break;
      }
      case 'q': memo_put(take_le(1)); break;
      case 'r': memo_put(take_le(4)); break;
      case 0x94: memo_put(memo_.size()); break;
      case 'h': memo_get(take_le(1)); break;
      case 'j': memo_get(take_le(4)); break;
      case 'c': {
        const std::string module = take_line();
        const std::string name = take_line();
        push(global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        need(2);
        const Ref name = pop(), module = pop();
        if (at(module).kind != Kind::kString || at(name).kind != Kind::kString)
          fail_at(op_at_, "STACK_GLOBAL of {} and {}, not two strings", kind_name(at(module).kind),
                  kind_name(at(name).kind));
        push(global(at(module).text, at(name).text));
        break;
      }
      case 'R': need(2); reduce(); break;
      case 'b': {
        // Module.state_dict() sets _metadata on the OrderedDict (module versions), which pickle
        // writes as BUILD with a dict. recur has no use for it and sets nothing.
        need(2);
        const Ref state = pop();
        const Ref target = top();
        if (at(target).kind != Kind::kDict || at(state).kind != Kind::kDict)
          fail_at(op_at_, "BUILD of {} with {}: only a state dict's _metadata is allowed",
                  kind_name(at(target).kind), kind_name(at(state).kind));
        break;
      }
      case 'Q': persistent_id(); break;
      case '.': stopped = true; break;
      default: {
        const char* name = opcode_name(op_);
        if (name) fail_at(op_at_, "opcode {} (0x{:02x}) {}", name, op_, kNoCode);
        fail_at(op_at_, "byte 0x{:02x} is not a pickle opcode", op_);
      }
    }
  }
  if (!marks_.empty()) fail_at(op_at_, "STOP with {} MARKs still open", marks_.size());
  if (stack_.size() != 1)
    fail_at(op_at_, "STOP with {} values on the stack, expected the state dict alone",
            stack_.size());
  if (pos_ != p_.size())
    fail_at(pos_, "{} bytes after STOP", p_.size() - pos_);

  const Object& root = at(stack_.back());
  if (root.kind != Kind::kDict)
    fail_at(op_at_, "the pickle holds {}, not a state dict (an OrderedDict of tensors)",
            kind_name(root.kind));
  std::vector<TorchTensorInfo> out;
  for (std::size_t i = 0; i < root.items.size(); i += 2) {
    const std::string& name = at(root.items[i]).text;
    const Object& value = at(root.items[i + 1]);
    if (value.kind != Kind::kTensor)
      fail_at(op_at_,
              "'{}' holds {}, not a tensor (recur reads a state dict of tensors; a training "
              "checkpoint keeps its model's under a key such as 'state_dict')",
              printable(name), kind_name(value.kind));
    out.push_back(finish(name, tensors_[static_cast<std::size_t>(value.integer)]));
  }
  return out;
}

// The checks of one tensor against its storage, in elements; overflow is an error everywhere.
TorchTensorInfo Unpickler::finish(const std::string& name, const Tensor& t) const {
  const Storage& s = storages_[t.storage];
  const std::string what = fmt::format("tensor '{}' (shape {}, stride {}, storage offset {})",
                                       printable(name), dims_string(t.size), dims_string(t.stride),
                                       t.offset);
  if (t.offset < 0) fail_at(t.at, "{}: negative storage offset", what);
  std::uint64_t elements = 1;
  for (std::size_t i = 0; i < t.size.size(); ++i) {
    if (t.size[i] < 0) fail_at(t.at, "{}: negative size", what);
    if (t.stride[i] < 0) fail_at(t.at, "{}: negative stride", what);
    if (!checked_mul(elements, static_cast<std::uint64_t>(t.size[i]), elements))
      fail_at(t.at, "{}: the element count overflows 64 bits", what);
  }
  const auto offset = static_cast<std::uint64_t>(t.offset);
  if (elements > s.numel)
    fail_at(t.at, "{}: {} elements, more than its storage's {}", what, elements, s.numel);
  // The last element's index + 1: offset + sum((size_i - 1) * stride_i) + 1.
  std::uint64_t extent = offset;
  if (elements > 0) {
    for (std::size_t i = 0; i < t.size.size(); ++i) {
      std::uint64_t step = 0;
      if (!checked_mul(static_cast<std::uint64_t>(t.size[i] - 1),
                       static_cast<std::uint64_t>(t.stride[i]), step) ||
          !checked_add(extent, step, extent))
        fail_at(t.at, "{}: its extent overflows 64 bits", what);
    }
    if (!checked_add(extent, 1, extent)) fail_at(t.at, "{}: its extent overflows 64 bits", what);
  }
  if (extent > s.numel)
    fail_at(t.at, "{}: reaches element {} of its storage '{}', which has {}", what, extent,
            printable(s.entry), s.numel);
  // Row-major: each stride the product of the sizes after it (a dimension of size 1 may have
  // any stride: torch leaves whatever a view gave it).
  if (elements > 0) {
    std::uint64_t expected = 1;
    for (std::size_t i = t.size.size(); i-- > 0;) {
      if (t.size[i] != 1 && static_cast<std::uint64_t>(t.stride[i]) != expected)
        fail_at(t.at,
                "{}: the strides are not row-major (recur reads contiguous tensors; save this "
                "one with .contiguous())",
                what);
      expected *= static_cast<std::uint64_t>(t.size[i]);
    }
  }
  TorchTensorInfo info;
  info.name = name;
  info.dtype = s.dtype;
  info.shape = t.size;
  info.storage = s.entry;
  const auto elsize = static_cast<std::uint64_t>(torch_dtype_size(s.dtype));
  info.offset = offset * elsize;  // offset <= numel, whose bytes were checked to fit
  info.bytes = elements * elsize;
  return info;
}

}  // namespace

std::vector<TorchTensorInfo> detail::read_state_dict(std::string_view pickle,
                                                     const std::string& file,
                                                     const std::string& pickle_entry,
                                                     const std::string& data_prefix,
                                                     const TorchEntrySize& entry_size) {
  return Unpickler(pickle, file, pickle_entry, data_prefix, entry_size).run();
}

// ---- the archive -----------------------------------------------------------------------------

struct TorchCheckpoint::Archive {
  std::string buffer;  // the bytes of an archive opened from memory: libzip reads them in place
  std::uint64_t file_size = 0;
  zip_t* zip = nullptr;
  std::mutex mutex;
  ~Archive() {
    if (zip) zip_discard(zip);  // read-only: nothing to write back
  }
};

namespace {

struct Entry {
  zip_uint64_t index;
  std::uint64_t size;
};

// The checks of an entry before any of it is decompressed: stored or deflated, not encrypted,
// and a declared size that the file's size can account for.
Entry check_entry(const TorchCheckpoint::Archive& a, const std::string& file, zip_uint64_t index,
                  const zip_stat_t& st) {
  const std::string name = printable(st.name ? st.name : "");
  const zip_uint64_t need = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
  if ((st.valid & need) != need) fail(file, "entry '{}': libzip does not know its size", name);
  if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)
    fail(file, "entry '{}' is encrypted", name);
  if (st.comp_size > a.file_size)
    fail(file, "entry '{}' claims {} compressed bytes in a file of {}", name, st.comp_size,
         a.file_size);
  if (st.comp_method == ZIP_CM_STORE) {
    if (st.size != st.comp_size)
      fail(file, "entry '{}' is stored, yet claims {} bytes in {}", name, st.size, st.comp_size);
  } else if (st.comp_method == ZIP_CM_DEFLATE) {
    std::uint64_t most = 0;
    if (!checked_mul(st.comp_size + 1, kMaxDeflateRatio, most) || st.size > most)
      fail(file, "entry '{}' claims {} bytes from {} deflated bytes, more than deflate can make",
           name, st.size, st.comp_size);
  } else {
    fail(file, "entry '{}' uses compression method {} (recur reads stored and deflated entries)",
         name, st.comp_method);
  }
  return Entry{index, st.size};
}

// Reads exactly `size` bytes of an entry; libzip checks the CRC as the entry ends.
std::string read_entry(zip_t* zip, const std::string& file, const std::string& name,
                       zip_uint64_t index, std::uint64_t size) {
  zip_file_t* f = zip_fopen_index(zip, index, 0);
  if (!f) fail(file, "entry '{}': cannot open it: {}", printable(name), zip_strerror(zip));
  struct Closer {
    zip_file_t* f;
    ~Closer() { zip_fclose(f); }
  } closer{f};
  std::string out(static_cast<std::size_t>(size), '\0');
  std::uint64_t done = 0;
  while (done < size) {
    const zip_int64_t n = zip_fread(f, out.data() + done, size - done);
    if (n < 0) fail(file, "entry '{}': {} at byte {}", printable(name), zip_file_strerror(f), done);
    if (n == 0) fail(file, "entry '{}' ends after {} of its {} bytes", printable(name), done, size);
    done += static_cast<std::uint64_t>(n);
  }
  char extra;
  const zip_int64_t n = zip_fread(f, &extra, 1);
  if (n < 0) fail(file, "entry '{}': {}", printable(name), zip_file_strerror(f));
  if (n > 0) fail(file, "entry '{}' holds more than its declared {} bytes", printable(name), size);
  return out;
}

void load(TorchCheckpoint::Archive& a, const std::string& file,
          std::map<std::string, TorchTensorInfo>& tensors, std::vector<std::string>& order) {
  const zip_int64_t count = zip_get_num_entries(a.zip, 0);
  if (count < 0) fail(file, "cannot list the archive: {}", zip_strerror(a.zip));
  if (static_cast<std::uint64_t>(count) > kMaxEntries)
    fail(file, "the archive has {} entries, more than {}", count, kMaxEntries);
  std::unordered_map<std::string, std::pair<zip_uint64_t, zip_stat_t>> entries;
  std::string pickle_name;
  for (zip_uint64_t i = 0; i < static_cast<zip_uint64_t>(count); ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(a.zip, i, 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) || !st.name)
      fail(file, "entry {}: cannot read it: {}", i, zip_strerror(a.zip));
    const std::string name = st.name;
    if (!entries.emplace(name, std::make_pair(i, st)).second)
      fail(file, "entry '{}' appears twice in the archive", printable(name));
    // <prefix>/data.pkl, the prefix a single folder (torch names it after the file).
    const std::size_t slash = name.find('/');
    if (slash != std::string::npos && slash > 0 &&
        name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      if (!pickle_name.empty())
        fail(file, "two pickles, '{}' and '{}': not one torch.save checkpoint",
             printable(pickle_name), printable(name));
      pickle_name = name;
    }
  }
  if (pickle_name.empty())
    fail(file, "no <prefix>/data.pkl entry in the archive: not a torch.save checkpoint");
  const std::string prefix = pickle_name.substr(0, pickle_name.size() - std::strlen("data.pkl"));

  const auto byteorder = entries.find(prefix + "byteorder");
  if (byteorder != entries.end()) {
    const Entry e = check_entry(a, file, byteorder->second.first, byteorder->second.second);
    if (e.size > 16) fail(file, "entry '{}byteorder' has {} bytes", printable(prefix), e.size);
    const std::string order_text = read_entry(a.zip, file, byteorder->first, e.index, e.size);
    if (order_text != "little")
      fail(file, "entry '{}byteorder' says '{}': recur reads little-endian storages",
           printable(prefix), printable(order_text));
  }

  const auto& [pickle_index, pickle_stat] = entries.at(pickle_name);
  const Entry pe = check_entry(a, file, pickle_index, pickle_stat);
  if (pe.size > kMaxPickleBytes)
    fail(file, "entry '{}' has {} bytes, more than the limit of {}", printable(pickle_name),
         pe.size, kMaxPickleBytes);
  const std::string pickle = read_entry(a.zip, file, pickle_name, pe.index, pe.size);

  const detail::TorchEntrySize entry_size =
      [&](const std::string& name) -> std::optional<std::uint64_t> {
    const auto found = entries.find(name);
    if (found == entries.end()) return std::nullopt;
    return check_entry(a, file, found->second.first, found->second.second).size;
  };
  for (auto& t : detail::read_state_dict(pickle, file, printable(pickle_name), prefix + "data/",
                                         entry_size)) {
    order.push_back(t.name);
    tensors.emplace(t.name, std::move(t));
  }
}

[[noreturn]] void fail_open(const std::string& file, zip_error_t* error, bool pickle_magic) {
  const std::string why = zip_error_strerror(error);
  const bool not_zip = zip_error_code_zip(error) == ZIP_ER_NOZIP;
  zip_error_fini(error);
  if (not_zip && pickle_magic)
    fail(file,
         "not a zip archive but a bare pickle: the format of torch.save before 1.6, which recur "
         "does not read");
  fail(file, "not a readable zip archive ({})", why);
}

}  // namespace

TorchCheckpoint TorchCheckpoint::open_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail(path, "no such file (or not a regular file)");
  const auto size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot read the file: {}", ec.message());
  char magic[2] = {0, 0};
  std::ifstream(path, std::ios::binary).read(magic, 2);

  TorchCheckpoint c;
  c.source_ = path;
  c.archive_ = std::make_shared<Archive>();
  c.archive_->file_size = size;
  int code = 0;
  c.archive_->zip = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!c.archive_->zip) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    fail_open(path, &error, static_cast<unsigned char>(magic[0]) == 0x80);
  }
  load(*c.archive_, path, c.tensors_, c.order_);
  return c;
}

TorchCheckpoint TorchCheckpoint::open_buffer(std::string bytes, const std::string& name) {
  TorchCheckpoint c;
  c.source_ = name;
  c.archive_ = std::make_shared<Archive>();
  Archive& a = *c.archive_;
  a.buffer = std::move(bytes);  // moved first: the source below points into it
  a.file_size = a.buffer.size();
  const bool pickle_magic = !a.buffer.empty() && static_cast<unsigned char>(a.buffer[0]) == 0x80;
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(a.buffer.data(), a.buffer.size(), 0, &error);
  if (!source) fail_open(name, &error, pickle_magic);
  a.zip = zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (!a.zip) {
    zip_source_free(source);  // the archive owns it only once opened
    fail_open(name, &error, pickle_magic);
  }
  zip_error_fini(&error);
  load(a, name, c.tensors_, c.order_);
  return c;
}

const TorchTensorInfo& TorchCheckpoint::info(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end())
    throw ArgumentError(fmt::format("[TorchCheckpoint::info] {}: no tensor named '{}'", source_,
                                    printable(name)));
  return found->second;
}

std::string TorchCheckpoint::read_bytes(const std::string& name) const {
  const TorchTensorInfo& t = info(name);
  std::lock_guard<std::mutex> lock(archive_->mutex);
  const zip_int64_t index = zip_name_locate(archive_->zip, t.storage.c_str(), 0);
  zip_stat_t st;
  zip_stat_init(&st);
  if (index < 0 || zip_stat_index(archive_->zip, static_cast<zip_uint64_t>(index), 0, &st) != 0)
    fail(source_, "entry '{}' is gone from the archive", printable(t.storage));
  const Entry e = check_entry(*archive_, source_, static_cast<zip_uint64_t>(index), st);
  std::string storage = read_entry(archive_->zip, source_, t.storage, e.index, e.size);
  if (t.offset + t.bytes > storage.size())  // checked at open; the entry is the same one
    fail(source_, "entry '{}' changed: {} bytes, tensor '{}' needs {}", printable(t.storage),
         storage.size(), printable(name), t.offset + t.bytes);
  return storage.substr(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.bytes));
}

std::vector<float> TorchCheckpoint::read_f32(const std::string& name) const {
  const TorchTensorInfo& t = info(name);
  if (t.dtype != TorchDType::kF32 && t.dtype != TorchDType::kF16 && t.dtype != TorchDType::kBF16)
    throw ArgumentError(fmt::format(
        "[TorchCheckpoint::read_f32] {}: tensor '{}' is {}, not F32, F16 or BF16", source_,
        printable(name), torch_dtype_name(t.dtype)));
  const std::string bytes = read_bytes(name);
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto n = static_cast<std::size_t>(t.elements());
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (t.dtype == TorchDType::kF32) {
      const std::uint32_t u = std::uint32_t(b[4 * i]) | std::uint32_t(b[4 * i + 1]) << 8 |
                              std::uint32_t(b[4 * i + 2]) << 16 | std::uint32_t(b[4 * i + 3]) << 24;
      std::memcpy(&out[i], &u, sizeof u);
    } else {
      const auto u = static_cast<std::uint16_t>(b[2 * i] | b[2 * i + 1] << 8);
      out[i] = t.dtype == TorchDType::kF16 ? f16_to_float(u) : bf16_to_float(u);
    }
    if (!std::isfinite(out[i]))
      throw NumericError(fmt::format("[TorchCheckpoint::read_f32] {}: tensor '{}' element {} is {}",
                                     source_, printable(name), i, out[i]));
  }
  return out;
}

}  // namespace recur
