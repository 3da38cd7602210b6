// The restricted unpickler of a PyTorch checkpoint's data.pkl. torch.load's unpickler imports
// and calls whatever globals a pickle names; this one knows four kinds of global and, for REDUCE,
// builds its own description of what torch would have built. The pickle is read once, front to
// back, without recursion: the limits below bound its memory and nesting however it is written.
#include <fmt/format.h>

#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "io/pytorch.h"
#include "recur/error.h"
#include "recur/safetensors.h"

namespace recur {

namespace {

using detail::checked_mul;
using detail::fail;
using detail::kMaxPickleBytes;
using detail::pickle_opcode_name;
using detail::printable;

// Each opcode makes at most one object; a real pickle makes about 20 a tensor.
constexpr std::size_t kMaxObjects = std::size_t(1) << 21;
// torch's pickles nest MARKs three deep and containers four deep.
constexpr std::size_t kMaxMarks = 64;
constexpr std::uint32_t kMaxDepth = 64;
constexpr std::size_t kMaxDims = 64;
constexpr std::size_t kMaxGlobalName = 256;
constexpr const char* kNoCode =
    "is not allowed in a state dict (recur reads tensors only, and never runs code from a "
    "checkpoint)";

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
  bool value_opcode();
  bool structure_opcode();
  std::vector<TorchTensorInfo> state_dict() const;
  template <class... Args>
  [[noreturn]] void fail_at(std::size_t at, fmt::format_string<Args...> f, Args&&... args) const {
    fail(file_, "{} offset {}: {}", entry_, at, fmt::format(f, std::forward<Args>(args)...));
  }

  const unsigned char* take(std::size_t n) {
    if (n > p_.size() - pos_)
      fail_at(op_at_, "{} needs {} bytes, only {} are left in the pickle", pickle_opcode_name(op_), n,
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
  const Object& at(Ref r) const { return objects_[r]; }

  std::size_t frame_base() const { return marks_.empty() ? 0 : marks_.back(); }
  void need(std::size_t n) const {
    const std::size_t have = stack_.size() - frame_base();
    if (have < n)
      fail_at(op_at_, "stack underflow: {} needs {} value{}, {} {} there{}", pickle_opcode_name(op_), n,
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
    if (marks_.empty()) fail_at(op_at_, "{} without a MARK before it", pickle_opcode_name(op_));
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
      fail_at(op_at_, "{} claims {} bytes, only {} are left in the pickle", pickle_opcode_name(op_), n,
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
    fail_at(op_at_, "{} on {}, not a dict", pickle_opcode_name(op_), kind_name(at(dict).kind));
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
    fail_at(op_at_, "{} on {}, not a list", pickle_opcode_name(op_), kind_name(at(list).kind));
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
    fail_at(op_at_, "{} of memo slot {}, which is empty", pickle_opcode_name(op_), index);
  push(found->second);
}

std::vector<TorchTensorInfo> Unpickler::run() {
  if (p_.size() > kMaxPickleBytes)
    fail(file_, "{} has {} bytes, more than the limit of {}", entry_, p_.size(), kMaxPickleBytes);
  if (p_.empty()) fail(file_, "{} is empty", entry_);
  for (;;) {
    if (pos_ >= p_.size())
      fail_at(pos_, "the pickle ends without STOP");
    op_at_ = pos_;
    op_ = static_cast<unsigned char>(p_[pos_++]);
    if (op_ == '.') break;  // STOP
    if (value_opcode() || structure_opcode()) continue;
    const char* name = pickle_opcode_name(op_);
    if (name) fail_at(op_at_, "opcode {} (0x{:02x}) {}", name, op_, kNoCode);
    fail_at(op_at_, "byte 0x{:02x} is not a pickle opcode", op_);
  }
  return state_dict();
}

// The opcodes that push a value (a number, a string, an empty container, a MARK) or only frame
// the pickle; false for any other.
bool Unpickler::value_opcode() {
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
    default:
      return false;
  }
  return true;
}

// The opcodes that build containers from the stack, use the memo, name globals and call them
// (REDUCE, BUILD, PERSID); false for any other.
bool Unpickler::structure_opcode() {
  switch (op_) {
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
    default:
      return false;
  }
  return true;
}

// After STOP: the pickle's one value, a dict of tensors, as the tensors' descriptions.
std::vector<TorchTensorInfo> Unpickler::state_dict() const {
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

}  // namespace recur
