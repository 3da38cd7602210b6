#include "recur/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "recur/error.h"
#include "util/check.h"
#include "util/file.h"
#include "util/json.h"
#include "io/safetensors_header.h"

namespace recur {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // as the reference implementation

template <class... Args>
[[noreturn]] void fail(const std::string& file, fmt::format_string<Args...> f, Args&&... args) {
  throw FormatError(
      fmt::format("[safetensors] {}: {}", file, fmt::format(f, std::forward<Args>(args)...)));
}

// An index lists one line per tensor: even the largest checkpoints' indexes are a few MB.
constexpr std::uint64_t kMaxIndexBytes = 100u << 20;

std::string read_index_file(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (!ec && size > kMaxIndexBytes)
    fail(path, "the index has {} bytes, more than the limit of {}", size, kMaxIndexBytes);
  auto text = detail::read_file(path, kMaxIndexBytes);
  if (!text) fail(path, "cannot read the index");
  return *text;
}

std::uint64_t le64(const unsigned char* p) {
  std::uint64_t x = 0;
  for (int i = 7; i >= 0; --i) x = (x << 8) | p[i];
  return x;
}

void put_le64(unsigned char* p, std::uint64_t x) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(x >> (8 * i));
}

/// Reads and checks one file's header; adds its tensors to `out`.
void read_header(const std::string& path, std::map<std::string, TensorInfo>& out) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot read the file: {}", ec.message());
  if (size < 8) fail(path, "the file has {} bytes, too short for the 8-byte header length", size);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the file for reading");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  if (!in) fail(path, "short read of the header length");
  const std::uint64_t header_len = le64(len_bytes);
  if (header_len > size - 8)
    fail(path, "the header claims {} bytes but the file has only {} after the length", header_len,
         size - 8);
  if (header_len > kMaxHeaderBytes)
    fail(path, "the header claims {} bytes, more than the limit of {}", header_len,
         kMaxHeaderBytes);
  if (header_len < 2) fail(path, "the header has {} bytes, too short for a JSON object", header_len);
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (!in) fail(path, "short read of the header");
  detail::check_header(path, size, header, out);
}

}  // namespace

void detail::check_header(const std::string& path, std::uint64_t size, const std::string& header,
                          std::map<std::string, TensorInfo>& out) {
  const std::uint64_t header_len = header.size();
  if (header_len < 2 || header_len + 8 > size)
    fail(path, "the header has {} bytes in a file of {}", header_len, size);
  if (header[0] != '{') fail(path, "the header does not start with '{{'");
  const json::Value root = json::parse(header, "safetensors] " + path + ": [header");
  if (!root.is_object()) fail(path, "the header is {}, not an object", root.kind_name());

  const std::uint64_t data_start = 8 + header_len;
  const std::uint64_t data_size = size - data_start;
  struct Range {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : root.object()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "__metadata__ is {}, not an object", entry.kind_name());
      for (const auto& [key, value] : entry.object())
        if (!value.is_string())
          fail(path, "__metadata__ entry '{}' is {}, not a string", key, value.kind_name());
      continue;
    }
    if (!entry.is_object()) fail(path, "tensor '{}': entry is {}, not an object", name, entry.kind_name());
    TensorInfo t;
    t.name = name;
    t.file = path;
    const json::Value* dtype = entry.find("dtype");
    const json::Value* shape = entry.find("shape");
    const json::Value* offsets = entry.find("data_offsets");
    for (const auto& [key, value] : entry.object()) {
      (void)value;
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        fail(path, "tensor '{}': unknown field '{}'", name, key);
    }
    if (!dtype || !dtype->is_string()) fail(path, "tensor '{}': missing or non-string dtype", name);
    const std::string& d = dtype->string();
    if (d == "F32") t.dtype = DType::kF32;
    else if (d == "F16") t.dtype = DType::kF16;
    else if (d == "BF16") t.dtype = DType::kBF16;
    else if (d == "I8") t.dtype = DType::kI8;
    else if (d == "U8") t.dtype = DType::kU8;
    else if (d == "I64") t.dtype = DType::kI64;
    else fail(path, "tensor '{}': dtype {} is not supported (recur reads F32, F16 and BF16, I8 "
              "and U8 as quantized codes, and I64 as bytes)", name, d);
    if (!shape || !shape->is_array()) fail(path, "tensor '{}': missing or non-array shape", name);
    std::uint64_t elements = 1;
    for (const auto& dim : shape->array()) {
      if (!dim.is_integer() || dim.integer() < 0)
        fail(path, "tensor '{}': shape holds {} where a non-negative integer belongs", name,
             dim.is_number() ? fmt::format("{}", dim.number()) : dim.kind_name());
      const auto n = static_cast<std::uint64_t>(dim.integer());
      if (n != 0 && elements > std::numeric_limits<std::uint64_t>::max() / 16 / n)
        fail(path, "tensor '{}': the shape's element count overflows", name);
      elements *= n;
      t.shape.push_back(dim.integer());
    }
    if (!offsets || !offsets->is_array() || offsets->array().size() != 2 ||
        !offsets->array()[0].is_integer() || !offsets->array()[1].is_integer() ||
        offsets->array()[0].integer() < 0 || offsets->array()[1].integer() < 0)
      fail(path, "tensor '{}': data_offsets must be two non-negative integers", name);
    const auto begin = static_cast<std::uint64_t>(offsets->array()[0].integer());
    const auto end = static_cast<std::uint64_t>(offsets->array()[1].integer());
    if (end < begin) fail(path, "tensor '{}': data_offsets [{}, {}] end before they begin", name, begin, end);
    const std::uint64_t expected = elements * static_cast<std::uint64_t>(dtype_size(t.dtype));
    if (end - begin != expected)
      fail(path, "tensor '{}': data_offsets [{}, {}] span {} bytes, but {} {} of {} takes {}", name,
           begin, end, end - begin, t.shape_string(), d, elements, expected);
    if (end > data_size)
      fail(path, "tensor '{}': data_offsets [{}, {}] run past the end of the data ({} bytes)", name,
           begin, end, data_size);
    t.offset = data_start + begin;
    t.bytes = end - begin;
    ranges.push_back({begin, end, name});
    if (out.count(name)) fail(path, "tensor '{}' appears in more than one file", name);
    out.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    if (r.begin < covered)
      fail(path, "tensor '{}': data_offsets [{}, {}] overlap tensor '{}'", r.name, r.begin, r.end,
           ranges[i - 1].name);
    if (r.begin > covered)
      fail(path, "tensor '{}': data_offsets [{}, {}] leave a hole of {} bytes before it", r.name,
           r.begin, r.end, r.begin - covered);
    covered = r.end;
  }
  if (covered != data_size)
    fail(path, "the tensors cover {} bytes of data but the file holds {}", covered, data_size);
}

std::int64_t TensorInfo::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string TensorInfo::shape_string() const { return recur::shape_string(shape); }

TensorStore TensorStore::open_file(const std::string& path) {
  TensorStore store;
  store.source_ = path;
  read_header(path, store.tensors_);
  return store;
}

TensorStore TensorStore::open_dir(const std::string& dir) {
  const fs::path base(dir);
  const fs::path single = base / "model.safetensors";
  const fs::path index = base / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(single, ec)) return open_file(single.string());
  if (!fs::exists(index, ec))
    throw FormatError(fmt::format(
        "[safetensors] {}: neither model.safetensors nor model.safetensors.index.json is there",
        dir));
  TensorStore store;
  store.source_ = index.string();
  const std::string& ipath = store.source_;
  const json::Value root = json::parse(read_index_file(ipath), "safetensors] " + ipath + ": [index");
  if (!root.is_object()) fail(ipath, "the index is {}, not an object", root.kind_name());
  const json::Value* map = root.find("weight_map");
  if (!map || !map->is_object()) fail(ipath, "the index has no weight_map object");
  std::set<std::string> shards;
  std::set<std::string_view> listed;  // looked up once per tensor: no scan of the whole map
  for (const auto& [name, file] : map->object()) {
    listed.insert(name);
    if (!file.is_string()) fail(ipath, "weight_map entry '{}' is {}, not a file name", name, file.kind_name());
    const std::string& f = file.string();
    // Any name of a file in the model directory (published shards are named many ways:
    // model-00001-of-00002.safetensors, model.safetensors-00001-of-00001.safetensors); never a
    // path, which could lead out of it, nor a name a NUL would cut short.
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos ||
        f.find('\0') != std::string::npos || f == "." || f == "..") {
      std::string shown;  // a NUL would end the message
      for (const char ch : f)
        shown += ch == '\0' ? std::string("\\0") : std::string(1, ch);
      fail(ipath, "weight_map entry '{}' names '{}', which is not a file in the model directory",
           name, shown);
    }
    shards.insert(f);
  }
  if (shards.empty()) fail(ipath, "the weight_map is empty");
  for (const auto& shard : shards) read_header((base / shard).string(), store.tensors_);
  for (const auto& [name, file] : map->object()) {
    const auto it = store.tensors_.find(name);
    const std::string expected = (base / file.string()).string();
    if (it == store.tensors_.end())
      fail(ipath, "tensor '{}' is listed in {} but that file does not hold it", name, file.string());
    if (it->second.file != expected)
      fail(ipath, "tensor '{}' is listed in {} but found in {}", name, file.string(), it->second.file);
  }
  for (const auto& [name, info] : store.tensors_)
    if (!listed.count(name))
      fail(ipath, "tensor '{}' in {} is missing from the weight_map", name, info.file);
  return store;
}

const TensorInfo& TensorStore::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(source_, "tensor '{}' is missing", name);
  return it->second;
}

std::vector<std::uint8_t> TensorStore::read_bytes(const std::string& name) const {
  const TensorInfo& t = info(name);
  std::vector<std::uint8_t> raw(t.bytes);
  std::ifstream in(t.file, std::ios::binary);
  if (!in) fail(t.file, "cannot open the file for reading");
  in.seekg(static_cast<std::streamoff>(t.offset));
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(t.bytes));
  if (!in) fail(t.file, "tensor '{}': short read ({} bytes at offset {}); did the file change?", name, t.bytes, t.offset);
  return raw;
}

std::vector<float> TensorStore::read(const std::string& name) const {
  const TensorInfo& t = info(name);
  // Integer codes mean nothing without their scales: widening them would make a wrong model.
  if (t.dtype == DType::kI64)
    fail(t.file, "tensor '{}' {} is I64, not a float tensor (F32, F16 or BF16)", name,
         t.shape_string());
  if (!is_float_dtype(t.dtype))
    fail(t.file, "tensor '{}' {} is {}, the integer codes of a quantized weight, not a float "
         "tensor (F32, F16 or BF16)", name, t.shape_string(), dtype_name(t.dtype));
  const std::vector<std::uint8_t> raw = read_bytes(name);
  const auto n = static_cast<std::size_t>(t.elements());
  std::vector<float> out(n);
  if (t.dtype == DType::kF32) {
    std::memcpy(out.data(), raw.data(), n * sizeof(float));
  } else {
    const auto widen = t.dtype == DType::kF16 ? f16_to_float : bf16_to_float;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = widen(h);
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i]))
      fail(t.file, "tensor '{}' {}: element {} is {}", name, t.shape_string(), i, out[i]);
  return out;
}

namespace {

struct HeaderEntry {
  const std::string& name;
  DType dtype;
  const std::vector<std::int64_t>& shape;
};

// The JSON header, padded to a multiple of 8 bytes; refuses a name given twice.
std::string make_header(const std::vector<HeaderEntry>& tensors,
                        const std::map<std::string, std::string>& metadata, const char* call) {
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + json::quote(k) + ":" + json::quote(v);
      first = false;
    }
    header += "}";
    first = false;
  }
  std::uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (!names.insert(t.name).second)
      detail::throw_argument(call, "tensor '{}' is given twice", t.name);
    std::uint64_t n = 1;
    std::string shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      n *= static_cast<std::uint64_t>(t.shape[i]);
      shape += (i ? "," : "") + std::to_string(t.shape[i]);
    }
    const std::uint64_t bytes = n * static_cast<std::uint64_t>(dtype_size(t.dtype));
    header += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          first ? "" : ",", json::quote(t.name), dtype_name(t.dtype), shape, offset,
                          offset + bytes);
    first = false;
    offset += bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  return header;
}

std::size_t element_count(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       DType dtype, const std::map<std::string, std::string>& metadata) {
  if (!is_float_dtype(dtype))
    detail::throw_argument("write_safetensors", "dtype {} is not a float type (F32, F16, BF16); "
                           "write integer codes with write_safetensors_stored", dtype_name(dtype));
  std::vector<HeaderEntry> entries;
  for (const auto& t : tensors) entries.push_back({t.name, dtype, t.shape});
  const std::string header = make_header(entries, metadata, "write_safetensors");

  detail::AtomicFile out(path, "write_safetensors");
  unsigned char len[8];
  put_le64(len, header.size());
  out.write(len, 8);
  out.write(header);
  std::vector<unsigned char> buf;
  for (const auto& t : tensors) {
    const std::size_t n = element_count(t.shape);
    buf.resize(n * static_cast<std::size_t>(dtype_size(dtype)));
    for (std::size_t i = 0; i < n; ++i) {
      if (dtype == DType::kF32) {
        std::memcpy(buf.data() + 4 * i, t.values + i, 4);
      } else {
        const std::uint16_t h =
            dtype == DType::kF16 ? float_to_f16(t.values[i]) : float_to_bf16(t.values[i]);
        std::memcpy(buf.data() + 2 * i, &h, 2);
      }
    }
    out.write(buf.data(), buf.size());
  }
  out.commit();
}

void write_safetensors_stored(const std::string& path,
                              const std::vector<StoredTensorData>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<HeaderEntry> entries;
  for (const auto& t : tensors) {
    if (!t.bytes && element_count(t.shape) != 0)
      detail::throw_argument("write_safetensors_stored", "tensor '{}' {} has no bytes", t.name,
                             shape_string(t.shape));
    entries.push_back({t.name, t.dtype, t.shape});
  }
  const std::string header = make_header(entries, metadata, "write_safetensors_stored");
  detail::AtomicFile out(path, "write_safetensors_stored");
  unsigned char len[8];
  put_le64(len, header.size());
  out.write(len, 8);
  out.write(header);
  for (const auto& t : tensors)
    out.write(t.bytes, element_count(t.shape) * static_cast<std::size_t>(dtype_size(t.dtype)));
  out.commit();
}


}  // namespace recur
