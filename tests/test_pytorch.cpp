// Reading PyTorch checkpoints: what torch.save wrote (tests/data/pytorch, made by
// make_fixtures.py with Debian's python3-torch) comes back byte for byte, and every hostile or
// broken archive is refused with a FormatError that names the problem, without anything in it
// ever running.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/pytorch.h"
#include "recur/error.h"
#include "recur/model.h"
#include "recur/pytorch.h"
#include "support/temp_dir.h"
#include "util/file.h"
#include "util/json.h"

using namespace recur;

namespace {

const std::string kDir = RECUR_PYTORCH_FIXTURES;
// What the os.system payloads would create (make_fixtures.py's MARKER).
const char* kMarker = "/tmp/recur-pytorch-fixture-was-executed";

std::string fixture(const std::string& name) { return kDir + "/" + name; }

std::string slurp(const std::string& path) {
  auto bytes = detail::read_file(path);
  REQUIRE(bytes);
  return *bytes;
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    out += digits[u >> 4];
    out += digits[u & 15];
  }
  return out;
}

// Checks every tensor of `file` against expected.json, by bytes and (for floats) by value.
void check_against_expected(const std::string& file) {
  const json::Value all = json::parse(slurp(fixture("expected.json")), "expected.json");
  const json::Value* want = all.find(file);
  REQUIRE(want);
  for (const auto& checkpoint : {TorchCheckpoint::open_file(fixture(file)),
                                 TorchCheckpoint::open_buffer(slurp(fixture(file)), file)}) {
    REQUIRE(checkpoint.tensors().size() == want->object().size());
    for (const auto& [name, w] : want->object()) {
      INFO(file << ": " << name);
      REQUIRE(checkpoint.contains(name));
      const TorchTensorInfo& t = checkpoint.info(name);
      CHECK(std::string(torch_dtype_name(t.dtype)) == w.find("dtype")->string());
      std::vector<std::int64_t> shape;
      for (const auto& d : w.find("shape")->array()) shape.push_back(d.integer());
      CHECK(t.shape == shape);
      const std::string bytes = checkpoint.read_bytes(name);
      CHECK(bytes.size() == t.bytes);
      CHECK(hex(bytes) == w.find("hex")->string());
      if (const json::Value* values = w.find("values");
          values && t.dtype != TorchDType::kF64) {
        const std::vector<float> got = checkpoint.read_f32(name);
        REQUIRE(got.size() == values->array().size());
        for (std::size_t i = 0; i < got.size(); ++i)
          CHECK(got[i] == static_cast<float>(values->array()[i].number()));
      }
    }
  }
}

// Loads `file` (from disk and from memory) and expects a FormatError holding each of `parts`.
void check_refused(const std::string& file, std::initializer_list<const char*> parts) {
  for (int from_memory = 0; from_memory < 2; ++from_memory) {
    INFO(file << (from_memory ? " from memory" : " from disk"));
    try {
      if (from_memory) TorchCheckpoint::open_buffer(slurp(fixture(file)), fixture(file));
      else TorchCheckpoint::open_file(fixture(file));
      FAIL("no error for " << file);
    } catch (const FormatError& e) {
      const std::string message = e.what();
      INFO(message);
      CHECK(message.rfind("[load_pytorch] " + fixture(file) + ": ", 0) == 0);
      for (const char* part : parts) CHECK(message.find(part) != std::string::npos);
    }
  }
}

}  // namespace

TEST_CASE("a state dict that torch.save wrote reads back byte for byte", "[pytorch]") {
  check_against_expected("good.bin");
  const TorchCheckpoint c = TorchCheckpoint::open_file(fixture("good.bin"));
  // The state dict's own order, not the map's.
  CHECK(c.names() == std::vector<std::string>{"f32", "f16", "bf16", "i64", "scalar",
                                              "shared.base", "shared.view", "empty", "i32", "u8",
                                              "bool", "f64"});
  CHECK(c.info("scalar").shape.empty());
  CHECK(c.info("scalar").elements() == 1);
  // The view shares its storage with the whole, 2 elements in.
  CHECK(c.info("shared.view").storage == c.info("shared.base").storage);
  CHECK(c.info("shared.view").offset == 2 * 4);
  CHECK(c.info("shared.view").shape_string() == "(2, 3)");
  CHECK(c.info("empty").bytes == 0);
  CHECK_THROWS_AS(c.read_f32("i64"), ArgumentError);
  CHECK_THROWS_AS(c.info("missing"), ArgumentError);
}

TEST_CASE("a state dict of Parameters reads as their tensors", "[pytorch]") {
  check_against_expected("parameters.bin");
}

TEST_CASE("a plain dict with deflated entries reads like a stored OrderedDict", "[pytorch]") {
  check_against_expected("deflate.bin");
}

TEST_CASE("no global outside the allowed few is ever imported or called", "[pytorch]") {
  std::filesystem::remove(kMarker);
  check_refused("os_system.bin", {"data.pkl offset 2: global 'posix.system' is not allowed",
                                  "never runs code from a checkpoint"});
  check_refused("os_system_v4.bin", {"offset 25: global 'os.system' is not allowed"});
  check_refused("builtins_eval.bin", {"global 'builtins.eval' is not allowed"});
  check_refused("subprocess_popen.bin", {"global 'subprocess.Popen' is not allowed"});
  check_refused("builtin_getattr.bin", {"global '__builtin__.getattr' is not allowed"});
  check_refused("inst.bin", {"opcode INST (0x69) is not allowed"});
  // Each payload would have run `touch` on this file.
  CHECK_FALSE(std::filesystem::exists(kMarker));
}

TEST_CASE("tensors that do not fit their storages are refused", "[pytorch]") {
  check_refused("missing_storage.bin", {"storage '0' (archive/data/0) is not in the archive"});
  check_refused("short_storage.bin", {"storage '0' (archive/data/0) has 12 bytes, but 4 elements "
                                      "of F32 take 16"});
  check_refused("huge_shape.bin", {"tensor 'w'", "1099511627776 elements, more than its "
                                   "storage's 4"});
  check_refused("overflow_shape.bin", {"tensor 'w'", "element count overflows 64 bits"});
  check_refused("negative_stride.bin", {"tensor 'w'", "negative stride"});
  check_refused("offset_past_end.bin", {"tensor 'w'", "reaches element 102 of its storage"});
  check_refused("noncontiguous.bin", {"tensor 't' (shape (3, 2), stride (1, 3)",
                                      "not row-major", ".contiguous()"});
  check_refused("duplicate_name.bin", {"the name 'w' appears twice"});
}

TEST_CASE("broken archives and pickles are refused with where they broke", "[pytorch]") {
  check_refused("truncated.bin", {"not a readable zip archive"});
  check_refused("not_zip.bin", {"not a readable zip archive"});
  check_refused("no_data_pkl.bin", {"no <prefix>/data.pkl entry"});
  check_refused("empty_pickle.bin", {"archive/data.pkl is empty"});
  check_refused("no_stop.bin", {"data.pkl offset 3: the pickle ends without STOP"});
  check_refused("bad_memo.bin", {"data.pkl offset 2: BINGET of memo slot 7, which is empty"});
  check_refused("underflow.bin", {"data.pkl offset 2: stack underflow: REDUCE needs 2 values"});
  check_refused("deep_nesting.bin", {"MARKs nest deeper than 64 levels"});
  check_refused("deep_tuples.bin", {"containers nest deeper than 64 levels"});
}

TEST_CASE("a bare pickle (torch.save before 1.6) is named as such", "[pytorch]") {
  const std::string pickle("\x80\x02}.", 4);
  CHECK_THROWS_WITH(TorchCheckpoint::open_buffer(pickle, "old.bin"),
                    Catch::Contains("a bare pickle: the format of torch.save before 1.6"));
}

TEST_CASE("the unpickler refuses every opcode a state dict does not need", "[pytorch]") {
  const detail::TorchEntrySize none = [](const std::string&) { return std::nullopt; };
  const auto run = [&](const std::string& pickle) {
    return detail::read_state_dict(pickle, "x.bin", "x/data.pkl", "x/data/", none);
  };
  CHECK(run(std::string("\x80\x02}.", 4)).empty());
  // OBJ, NEWOBJ, NEWOBJ_EX, EXT1, PERSID (text), DUP, BINBYTES.
  for (const char* op : {"o", "\x81", "\x92", "\x82", "P", "2", "B"}) {
    const std::string pickle = std::string("\x80\x02", 2) + op + ".";
    CHECK_THROWS_WITH(run(pickle), Catch::Contains("x/data.pkl offset 2: opcode") &&
                                       Catch::Contains("is not allowed in a state dict"));
  }
  CHECK_THROWS_WITH(run(std::string("\x80\x02\xff.", 4)),
                    Catch::Contains("byte 0xff is not a pickle opcode"));
  // A state dict whose value is not a tensor, and bytes after STOP.
  CHECK_THROWS_WITH(run(std::string("\x80\x02}X\x01\x00\x00\x00" "aK\x01s.", 13)),
                    Catch::Contains("'a' holds an int, not a tensor"));
  CHECK_THROWS_WITH(run(std::string("\x80\x02}..", 5)), Catch::Contains("1 bytes after STOP"));
  // A string longer than the pickle.
  CHECK_THROWS_WITH(run(std::string("\x80\x02X\xff\xff\xff\x7f", 7)),
                    Catch::Contains("BINUNICODE claims 2147483647 bytes"));
}

namespace {

// The logits after a few tokens, and the checks that two loads are one model.
std::vector<float> last_logits(const std::shared_ptr<const Model>& m) {
  Decoder dec(m);
  const auto l = dec.prefill({1, 7, 42, 3, 99});
  return std::vector<float>(l.data(), l.data() + l.size());
}

void check_same_model(const std::shared_ptr<const Model>& got,
                      const std::shared_ptr<const Model>& want) {
  CHECK(got->fingerprint() == want->fingerprint());
  CHECK(got->weight_format() == want->weight_format());
  const auto a = last_logits(got), b = last_logits(want);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("a pytorch_model.bin that transformers wrote reads under its names as stored, and "
          "Lightning's with 'model.' taken off", "[pytorch]") {
  namespace fs = std::filesystem;
  SECTION("transformers: model.embeddings.weight, model.layers.N..., lm_head.weight") {
    // gla_transformers.bin is torch.save of tests/fla/gla-bf16's tensors (make_fixtures.py).
    const std::string gla = kDir + "/../../fla/gla-bf16";
    recur::testing::TempDir dir;
    fs::copy_file(gla + "/config.json", dir.file("config.json"));
    fs::copy_file(fixture("gla_transformers.bin"), dir.file("pytorch_model.bin"));
    const ModelFiles files = open_model_files(dir.str());
    CHECK(files.weights->has("model.embeddings.weight"));
    CHECK(files.weights->has("lm_head.weight"));
    check_same_model(Model::load(dir.str()), Model::load(gla));
  }
  SECTION("Lightning: model.transformer..., model.lm_head.weight, and metric buffers") {
    const std::string based = kDir + "/../../based/tiny";
    recur::testing::TempDir dir;
    fs::copy_file(based + "/config.json", dir.file("config.json"));
    fs::copy_file(based + "/pytorch_model.bin", dir.file("pytorch_model.bin"));
    const auto ckpt = TorchCheckpoint::open_file(dir.file("pytorch_model.bin"));
    REQUIRE(ckpt.contains("model.lm_head.weight"));
    REQUIRE(ckpt.contains("model.train_metrics.num-tokens.count"));
    const ModelFiles files = open_model_files(dir.str());
    CHECK(files.weights->has("lm_head.weight"));
    // The trainer's buffer, which Based's table lacks, is left out.
    CHECK_FALSE(files.weights->has("train_metrics.num-tokens.count"));
    check_same_model(Model::load(dir.str()), Model::load(based));
  }
  SECTION("a bare .pth (no config.json): the family found by the names without the prefix") {
    // rwkv7_wrapped.pth is tests/rwkv7/h2x16-f16.pth with "model." before every name.
    check_same_model(Model::load(fixture("rwkv7_wrapped.pth")),
                     Model::load(kDir + "/../../rwkv7/h2x16-f16.pth"));
    // Names that no family recognises either way: both attempts named.
    recur::testing::TempDir dir;
    fs::copy_file(fixture("gla_transformers.bin"), dir.file("gla.pth"));
    CHECK_THROWS_WITH(Model::load(dir.file("gla.pth")),
                      Catch::Contains("(as stored); with the wrapper prefix 'model.' removed: ") &&
                          Catch::Contains(dir.file("gla.pth")));
  }
}
