// PyTorch checkpoints: the zip archive, read with libzip, whose data.pkl the restricted
// unpickler of io/unpickle.cpp reads without calling anything.
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

using detail::checked_mul;
using detail::fail;
using detail::kMaxPickleBytes;
using detail::printable;

constexpr std::uint64_t kMaxEntries = 1u << 20;
// Deflate cannot expand data by more than about 1032 to 1.
constexpr std::uint64_t kMaxDeflateRatio = 1032;


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
