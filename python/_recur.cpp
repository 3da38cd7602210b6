// The native part of `import recur` (docs/python.md): the library's Model, Decoder (a State
// here), Tokenizer, Sampler and ChatTemplate, joined as the CLI joins them (tools/cmd_model.cpp).
// Nothing here computes a number: logits, samples and log-probabilities are the library's.
//
// What this layer owns is the boundary:
//  * Every argument is checked here, before the GIL is released and before anything reads it:
//    token ids come as Python ints or a 1-D C-contiguous numpy array of an integer dtype (any
//    other dtype or layout is refused, never reinterpreted), each within int's range; the
//    library then checks them against the vocabulary, and a refused call leaves the state as it
//    was (docs/contracts.md, "Nothing lost on bad input").
//  * The GIL is released in every call that computes; each State has a mutex, so that two
//    Python threads that share one state take turns instead of racing.
//  * A State holds its Model (the Python object), so a state outliving every other reference to
//    its model keeps it alive; a logits array viewing a state's buffer holds that state.
//  * recur's exceptions become ValueError (bad input: ArgumentError, ShapeError, FormatError) or
//    RuntimeError (NumericError and the rest), with the library's message.
#include <fmt/format.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "recur/chat_template.h"
#include "recur/error.h"
#include "recur/isa.h"
#include "recur/model.h"
#include "recur/quantize.h"
#include "recur/sampling.h"
#include "recur/tokenizer.h"
#include "text/unicode.h"  // Utf8Stream: the byte-level model's text, as the CLI streams it

namespace py = pybind11;

namespace recur::python {
namespace {

// A ValueError whose message starts with the call, as the library's messages do.
template <typename... Args>
[[noreturn]] void value_error(const char* call, fmt::format_string<Args...> format,
                              Args&&... args) {
  throw py::value_error(
      fmt::format("[{}] {}", call, fmt::format(format, std::forward<Args>(args)...)));
}

// Bytes as a Python str: a model's text is UTF-8 once decoded, but a byte-level model's piece
// or a world vocabulary's token need not be; ill-formed bytes become U+FFFD, never an error.
py::str to_str(const std::string& bytes) {
  PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()),
                                     "replace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// Token ids from Python, checked before anything reads them: a list, tuple or range of ints, or
// a 1-D C-contiguous numpy array of an integer dtype. Values outside int's range are refused
// here (the library then checks them against the vocabulary).
template <typename T>
void copy_ids(const py::array& a, std::vector<int>& out, const char* call, const char* arg) {
  const T* p = static_cast<const T*>(a.data());
  const auto n = static_cast<std::size_t>(a.shape(0));
  out.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    bool outside = false;
    if constexpr (std::is_signed<T>::value)
      outside = static_cast<long long>(p[i]) < INT_MIN || static_cast<long long>(p[i]) > INT_MAX;
    else
      outside = static_cast<unsigned long long>(p[i]) > static_cast<unsigned long long>(INT_MAX);
    if (outside) value_error(call, "{}[{}] is {}, outside the range of a token id", arg, i, p[i]);
    out[i] = static_cast<int>(p[i]);
  }
}

std::vector<int> token_ids(const py::handle& obj, const char* call, const char* arg) {
  std::vector<int> ids;
  if (py::isinstance<py::array>(obj)) {
    const auto a = py::reinterpret_borrow<py::array>(obj);
    const py::dtype dt = a.dtype();
    if (dt.kind() != 'i' && dt.kind() != 'u')
      value_error(call, "{} is a numpy array of dtype {}, expected an integer dtype (token ids)",
                  arg, dt.attr("name").cast<std::string>());
    if (a.ndim() != 1)
      value_error(call, "{} is a numpy array of {} dimensions, expected 1 (a sequence of ids)",
                  arg, a.ndim());
    if (!(a.flags() & py::array::c_style))
      value_error(call, "{} is a numpy array that is not contiguous; pass numpy.ascontiguousarray({})",
                  arg, arg);
    if (!dt.attr("isnative").cast<bool>())
      value_error(call, "{} has dtype {}, which is not in this machine's byte order", arg,
                  dt.attr("name").cast<std::string>());
    switch (dt.itemsize() * (dt.kind() == 'u' ? -1 : 1)) {
      case 8: copy_ids<std::int64_t>(a, ids, call, arg); break;
      case 4: copy_ids<std::int32_t>(a, ids, call, arg); break;
      case 2: copy_ids<std::int16_t>(a, ids, call, arg); break;
      case 1: copy_ids<std::int8_t>(a, ids, call, arg); break;
      case -8: copy_ids<std::uint64_t>(a, ids, call, arg); break;
      case -4: copy_ids<std::uint32_t>(a, ids, call, arg); break;
      case -2: copy_ids<std::uint16_t>(a, ids, call, arg); break;
      case -1: copy_ids<std::uint8_t>(a, ids, call, arg); break;
      default: value_error(call, "{} has dtype {}, of a size recur does not read", arg,
                           dt.attr("name").cast<std::string>());
    }
    return ids;
  }
  if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj))
    value_error(call, "{} is text, expected token ids (encode it with model.tokenizer first)", arg);
  if (!py::isinstance<py::sequence>(obj) && !py::hasattr(obj, "__iter__"))
    value_error(call, "{} is a {}, expected a sequence of token ids", arg,
                std::string(py::str(obj.get_type().attr("__name__"))));
  std::size_t i = 0;
  for (const py::handle item : obj) {
    if (!PyLong_Check(item.ptr()) || PyBool_Check(item.ptr()))
      value_error(call, "{}[{}] is a {}, expected an int (a token id)", arg, i,
                  std::string(py::str(item.get_type().attr("__name__"))));
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(item.ptr(), &overflow);
    if (overflow != 0 || v > INT_MAX || v < INT_MIN)
      value_error(call, "{}[{}] is {}, outside the range of a token id", arg, i,
                  std::string(py::str(item)));
    ids.push_back(static_cast<int>(v));
    ++i;
  }
  return ids;
}

// A model's way between text and ids: its tokenizer.json (or RWKV world vocabulary), or bytes
// (ids 0-255) for a model that ships none, as the CLI does.
class PyTokenizer {
 public:
  explicit PyTokenizer(std::shared_ptr<const Tokenizer> tokenizer) : tokenizer_(std::move(tokenizer)) {}

  std::vector<int> encode(const std::string& text, bool add_special_tokens) const {
    py::gil_scoped_release release;
    return tokenizer_ ? tokenizer_->encode(text, add_special_tokens) : ByteTokenizer().encode(text);
  }
  std::string decode(const std::vector<int>& ids, bool skip_special_tokens) const {
    if (!tokenizer_) return text::utf8_lossy(ByteTokenizer().decode(ids));
    py::gil_scoped_release release;
    return tokenizer_->decode(ids, skip_special_tokens);
  }
  int vocab_size() const { return tokenizer_ ? tokenizer_->vocab_size() : ByteTokenizer::kVocab; }
  std::optional<int> token_to_id(const std::string& token) const {
    if (tokenizer_) return tokenizer_->token_to_id(token);
    if (token.size() == 1) return static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }
  std::string id_to_token(int id) const {
    if (tokenizer_) return tokenizer_->id_to_token(id);
    if (id < 0 || id >= ByteTokenizer::kVocab)
      value_error("Tokenizer.id_to_token", "id is {}, expected 0 to 255 (a byte)", id);
    return ByteTokenizer().decode(id);
  }
  bool is_special(int id) const { return tokenizer_ && tokenizer_->is_special(id); }
  bool bytes() const { return !tokenizer_; }
  std::string describe() const {
    return tokenizer_ ? tokenizer_->describe() : std::string("bytes (ids 0-255)");
  }
  const std::shared_ptr<const Tokenizer>& tokenizer() const { return tokenizer_; }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;  // null: bytes
};

// Text as ids arrive: the tokenizer's DecodeStream, or bytes through a UTF-8 stream. Holds back
// what is not final yet (an incomplete UTF-8 sequence, a byte-fallback run).
class TextStream {
 public:
  TextStream(const std::shared_ptr<const Tokenizer>& tokenizer, bool skip_special_tokens) {
    if (tokenizer) stream_.emplace(tokenizer, skip_special_tokens);
  }
  std::string put(int id) {
    if (stream_) return stream_->put(id);
    return bytes_.put(ByteTokenizer().decode(id));
  }
  std::string finish() { return stream_ ? stream_->finish() : bytes_.finish(); }

 private:
  std::optional<DecodeStream> stream_;
  text::Utf8Stream bytes_{text::Utf8Stream::Invalid::kReplace};
};

// A loaded model with what joins it to text: the tokenizer beside it (or bytes), the sampler's
// mask, and its chat template, read when first used.
struct PyModel {
  std::shared_ptr<const Model> model;
  std::shared_ptr<PyTokenizer> tokenizer;  // null when the model cannot take text (no_text)
  std::shared_ptr<const TokenMask> mask;   // the ids the tokenizer decodes (null: every id)
  std::string no_text;                     // why text cannot go in or out ("" when it can)
  std::string files;                       // the folder of config.json and the tokenizer
  int threads = 0;
  std::shared_ptr<const ChatTemplate> chat;  // loaded by the first render_chat (under the GIL)

  void require_text(const char* call) const {
    if (!tokenizer) value_error(call, "{}", no_text);
  }
  int vocab_size() const { return model->config().vocab_size; }
};

std::shared_ptr<PyModel> open_model(const std::string& path, int threads,
                                     const std::optional<std::string>& tokenizer_path) {
  if (threads < 0) value_error("Model", "threads is {}, expected 0 (every core) or more", threads);
  auto m = std::make_shared<PyModel>();
  m->threads = threads;
  {
    py::gil_scoped_release release;
    m->model = Model::load(path);
  }
  // A bare checkpoint given as a file (BlinkDL's .pth) has its tokenizer beside it.
  std::error_code ec;
  const std::string files = std::filesystem::is_regular_file(path, ec)
                                ? std::filesystem::path(path).parent_path().string()
                                : path;
  m->files = files.empty() ? "." : files;
  if (tokenizer_path || Tokenizer::present(m->files)) {
    m->tokenizer = std::make_shared<PyTokenizer>(Tokenizer::load(tokenizer_path ? *tokenizer_path : m->files));
    m->mask = m->tokenizer->tokenizer()->sample_mask(m->vocab_size());
  } else if (std::string why = m->model->missing_tokenizer(m->files); !why.empty()) {
    // The library's reason names the CLI's options; Python's are the constructor's and ids.
    m->no_text = why + " (from Python: Model(path, tokenizer=FILE_OR_DIR), or token ids)";
  } else if (m->vocab_size() < ByteTokenizer::kVocab) {
    m->no_text = fmt::format("the model's vocabulary has {} ids, fewer than the 256 the "
                             "byte-level tokenizer needs: pass token ids", m->vocab_size());
  } else {
    m->tokenizer = std::make_shared<PyTokenizer>(nullptr);
  }
  return m;
}

// One sequence's state: a Decoder, with the Python model it came from and a mutex (the GIL is
// released while it computes).
//
// Its logits buffer stays at one address for the decoder's life (the library writes it in place;
// only Decoder::load replaces it, and a Python State never loads into an existing decoder:
// State.load makes a new one), so a numpy array may view it for as long as it holds the State.
struct PyState {
  PyState(std::shared_ptr<PyModel> owner_model, Decoder d)
      : owner(std::move(owner_model)), decoder(std::move(d)) {}
  std::shared_ptr<PyModel> owner;
  Decoder decoder;
  std::mutex mutex;
};

DecoderOptions options_for(const PyModel& m, int chunk) {
  DecoderOptions o;
  o.chunk = chunk;
  o.threads = m.threads;
  return o;
}

// The state's logits as a read-only float32 array: a view of its buffer that keeps the state
// alive (its values change with the next call on the state), or a copy.
py::array logits_array(const std::shared_ptr<PyState>& state, const float* data, bool copy) {
  const py::ssize_t n = state->owner->vocab_size();
  if (copy) {
    py::array_t<float> out(n);
    std::memcpy(out.mutable_data(), data, sizeof(float) * static_cast<std::size_t>(n));
    return std::move(out);
  }
  py::array view(py::dtype::of<float>(), {n}, {static_cast<py::ssize_t>(sizeof(float))}, data,
                 py::cast(state));
  py::detail::array_proxy(view.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return view;
}

py::array state_step(const std::shared_ptr<PyState>& s, long long token, bool copy) {
  const int V = s->owner->vocab_size();
  if (token < 0 || token >= V)
    value_error("State.step", "token is {}, expected 0 to vocab_size - 1 = {}", token, V - 1);
  const float* data = nullptr;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(s->mutex);
    data = s->decoder.step(static_cast<int>(token)).data();
  }
  return logits_array(s, data, copy);
}

py::array state_prefill(const std::shared_ptr<PyState>& s, const py::handle& ids_obj,
                        std::optional<int> chunk, bool all_logits, bool copy) {
  const std::vector<int> ids = token_ids(ids_obj, "State.prefill", "ids");
  if (chunk && *chunk < 1) value_error("State.prefill", "chunk is {}, expected >= 1", *chunk);
  const int V = s->owner->vocab_size();
  if (all_logits && ids.empty())
    value_error("State.prefill", "ids is empty: there are no rows of logits to return");
  py::array_t<float> rows;
  float* out = nullptr;
  if (all_logits) {
    rows = py::array_t<float>({static_cast<py::ssize_t>(ids.size()), static_cast<py::ssize_t>(V)});
    out = rows.mutable_data();
  }
  const float* last = nullptr;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(s->mutex);
    // The chunk stays the state's from here on (it changes speed, never a result).
    if (chunk && *chunk != s->decoder.options().chunk)
      s->decoder.set_options(options_for(*s->owner, *chunk));
    if (all_logits)
      last = s->decoder
                 .prefill(ids, {},
                          [&](std::int64_t pos, const float* logits) {
                            std::memcpy(out + pos * V, logits, sizeof(float) * std::size_t(V));
                          })
                 .data();
    else
      last = s->decoder.prefill(ids).data();
  }
  if (all_logits) return std::move(rows);
  return logits_array(s, last, copy);
}

std::shared_ptr<PyState> state_clone(const std::shared_ptr<PyState>& s) {
  py::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(s->mutex);
  return std::make_shared<PyState>(s->owner, s->decoder.clone());
}

std::shared_ptr<PyState> state_load(const std::shared_ptr<PyModel>& m,
                                    const std::filesystem::path& path, int chunk) {
  if (chunk < 1) value_error("State.load", "chunk is {}, expected >= 1", chunk);
  py::gil_scoped_release release;
  Decoder d(m->model, options_for(*m, chunk));
  d.load(path.string());
  return std::make_shared<PyState>(m, std::move(d));
}

// Per-token negative log-likelihoods of ids[1:] given those before, as `recur score` sums them.
py::array_t<double> model_score(const std::shared_ptr<PyModel>& m, const py::handle& ids_obj,
                                int chunk) {
  const std::vector<int> ids = token_ids(ids_obj, "Model.score", "ids");
  if (ids.size() < 2)
    value_error("Model.score", "ids has {} tokens, scoring needs at least 2", ids.size());
  if (chunk < 1) value_error("Model.score", "chunk is {}, expected >= 1", chunk);
  py::array_t<double> nll(static_cast<py::ssize_t>(ids.size() - 1));
  double* out = nll.mutable_data();
  {
    py::gil_scoped_release release;
    const int V = m->vocab_size();
    Decoder decoder(m->model, options_for(*m, chunk));
    decoder.prefill(ids, {}, [&](std::int64_t pos, const float* logits) {
      const auto next = static_cast<std::size_t>(pos + 1);
      if (next < ids.size()) out[pos] = -log_probability(logits, V, ids[next]);
    });
  }
  return nll;
}

// Generation: the prompt prefilled, then each next() samples from the state's logits with the
// CLI's sampler (masked to the ids the tokenizer decodes), steps, and returns the id and the text
// that became final. The text is decoded with the last tokens before it as context, as the CLI
// writes it.
class Generator {
 public:
  Generator(std::shared_ptr<PyState> state, const py::handle& prompt, long long max_tokens,
            float temperature, int top_k, float top_p, float repetition_penalty,
            unsigned long long seed, bool stop_at_eos)
      : state_(std::move(state)), max_tokens_(max_tokens), stop_at_eos_(stop_at_eos) {
    constexpr const char* call = "Model.generate";
    const std::vector<int> ids = token_ids(prompt, call, "prompt");
    if (max_tokens < 0) value_error(call, "max_tokens is {}, expected >= 0", max_tokens);
    SamplerOptions so;
    so.temperature = temperature;
    so.top_k = top_k;
    so.top_p = top_p;
    so.repetition_penalty = repetition_penalty;
    so.seed = seed;
    so.mask = state_->owner->mask;
    sampler_.emplace(so);  // checks the options
    const PyModel& m = *state_->owner;
    if (m.tokenizer) stream_.emplace(m.tokenizer->tokenizer(), false);
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (ids.empty() && state_->decoder.n_tokens() == 0)
      value_error(call, "the prompt is empty and the state has seen no token: nothing to continue from");
    if (!ids.empty()) state_->decoder.prefill(ids);
    history_ = ids;
    if (stream_) {
      const std::size_t n = std::min<std::size_t>(history_.size(), 8);
      for (std::size_t i = history_.size() - n; i < history_.size(); ++i) stream_->put(history_[i]);
    }
  }

  // (id, text), (None, the text held back) once at the end, then StopIteration.
  py::tuple next() {
    if (done_) {
      if (stream_ && !finished_) {
        finished_ = true;
        const std::string rest = stream_->finish();
        if (!rest.empty()) return py::make_tuple(py::none(), to_str(rest));
      }
      throw py::stop_iteration();
    }
    int token = -1;
    std::string text;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (count_ >= max_tokens_) {
        done_ = true;
        reason_ = "length";
      } else {
        token = sampler_->sample(state_->decoder.logits(), history_);
        const auto& eos = state_->decoder.model().config().eos_token_ids;
        if (stop_at_eos_ && std::find(eos.begin(), eos.end(), token) != eos.end()) {
          done_ = true;
          reason_ = "eos";
        } else {
          history_.push_back(token);
          if (stream_) text = stream_->put(token);
          state_->decoder.step(token);
          ++count_;
        }
      }
    }
    if (done_) return next();
    return py::make_tuple(token, to_str(text));
  }
  const std::string& finish_reason() const { return reason_; }
  const std::shared_ptr<PyState>& state() const { return state_; }

 private:
  std::shared_ptr<PyState> state_;
  long long max_tokens_;
  bool stop_at_eos_;
  std::optional<Sampler> sampler_;
  std::optional<TextStream> stream_;
  std::vector<int> history_;  // the prompt and every token since: the repetition penalty's context
  long long count_ = 0;
  bool done_ = false, finished_ = false;
  std::string reason_;
};

std::string render_chat(const std::shared_ptr<PyModel>& m, const std::string& messages_json,
                        const std::string& tools_json, bool add_generation_prompt,
                        const std::string& extra_json) {
  if (!m->chat) m->chat = std::make_shared<const ChatTemplate>(ChatTemplate::load(m->files));
  const std::shared_ptr<const ChatTemplate> chat = m->chat;
  py::gil_scoped_release release;
  return chat->render(messages_json, tools_json, add_generation_prompt, ChatContent::kAuto,
                      extra_json);
}

// recur quantize's checks and files, from Python (tools/cmd_write.cpp's run_quantize).
std::string quantize(const std::string& src, const std::string& dst, const std::string& type,
                     const std::optional<std::string>& head) {
  namespace fs = std::filesystem;
  constexpr const char* call = "quantize";
  for (const auto& [name, value] : {std::pair<const char*, std::string>{"type", type},
                                    {"head", head.value_or("q8")}})
    if (value != "q8" && value != "q4")
      value_error(call, "{} is '{}', expected 'q8' or 'q4'", name, value);
  std::error_code ec;
  if (!fs::is_directory(src, ec) && bare_checkpoint(src).empty())
    value_error(call, "src {} is not a model directory nor a .pth checkpoint", src);
  if (fs::exists(dst, ec) && fs::equivalent(src, dst, ec))
    value_error(call, "dst is src itself: quantize writes a new directory");
  for (const char* f : {"config.json", "model.safetensors"})
    if (fs::exists(fs::path(dst) / f, ec))
      value_error(call, "dst {} already holds a model ({}); choose another directory", dst, f);
  py::gil_scoped_release release;
  const ModelFiles files = open_model_files(src);
  if (!files.config.quantization.empty())
    value_error(call, "{} is already quantized ({}): quantize the model it was made from", src,
                files.config.quantization);
  QuantizeOptions options;
  options.format = type;
  options.head = head.value_or("");
  const QuantizeReport r = write_quantized_model(dst, files.config, *files.weights, options);
  const fs::path from_dir = files.bare && fs::is_regular_file(src, ec) ? fs::path(src).parent_path()
                                                                       : fs::path(src);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
                           "rwkv_vocab_v20230424.txt", "chat_template.jinja", "chat_template.json"})
    if (fs::is_regular_file(from_dir / name, ec))
      fs::copy_file(from_dir / name, fs::path(dst) / name, fs::copy_options::overwrite_existing);
  return r.weight_format;
}

}  // namespace
}  // namespace recur::python

PYBIND11_MODULE(_recur, m) {
  using namespace recur;
  using namespace recur::python;
  m.doc() = "recur's native module; use the `recur` package (docs/python.md).";
  // pybind11 finds numpy's C API on first use, in a function-local static whose initialisation
  // imports numpy, which may release the GIL: a second thread then takes the GIL and waits on
  // the static's guard while the first waits for the GIL (tests/python/test_threads.py met this
  // deadlock). Done here, at import, it happens once, on one thread.
  py::module_::import("numpy");
  (void)py::detail::npy_api::get();
  (void)py::dtype::of<float>();
  (void)py::dtype::of<double>();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ArgumentError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const ShapeError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const FormatError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  py::class_<PyTokenizer, std::shared_ptr<PyTokenizer>>(m, "Tokenizer")
      .def("encode", &PyTokenizer::encode, py::arg("text"), py::arg("add_special_tokens") = true)
      .def("decode",
           [](const PyTokenizer& t, const py::handle& ids, bool skip) {
             return to_str(t.decode(token_ids(ids, "Tokenizer.decode", "ids"), skip));
           },
           py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def_property_readonly("vocab_size", &PyTokenizer::vocab_size)
      .def("token_to_id", &PyTokenizer::token_to_id, py::arg("token"))
      .def("id_to_token", [](const PyTokenizer& t, int id) { return to_str(t.id_to_token(id)); },
           py::arg("id"))
      .def("is_special", &PyTokenizer::is_special, py::arg("id"))
      .def_property_readonly("bytes", &PyTokenizer::bytes)
      .def("decoder",
           [](const PyTokenizer& t, bool skip) {
             return std::make_shared<TextStream>(t.tokenizer(), skip);
           },
           py::arg("skip_special_tokens") = false)
      .def("__repr__", [](const PyTokenizer& t) { return "<recur.Tokenizer " + t.describe() + ">"; });

  py::class_<TextStream, std::shared_ptr<TextStream>>(m, "DecodeStream")
      .def("put", [](TextStream& s, int id) { return to_str(s.put(id)); }, py::arg("id"))
      .def("finish", [](TextStream& s) { return to_str(s.finish()); });

  py::class_<PyModel, std::shared_ptr<PyModel>>(m, "Model")
      .def(py::init(&open_model), py::arg("path"), py::arg("threads") = 0,
           py::arg("tokenizer") = py::none())
      // Model(seed, threads, random=True): the random-weight test model (Model.random in Python).
      .def(py::init([](std::uint64_t seed, int threads, bool random) {
             if (!random) value_error("Model", "random must be True with a seed");
             if (threads < 0) value_error("Model", "threads is {}, expected 0 or more", threads);
             auto pm = std::make_shared<PyModel>();
             pm->model = Model::builtin(seed);
             pm->threads = threads;
             pm->tokenizer = std::make_shared<PyTokenizer>(nullptr);
             pm->files = ".";
             return pm;
           }),
           py::arg("seed"), py::arg("threads"), py::arg("random"))
      .def_property_readonly("_config_json", [](const PyModel& pm) { return pm.model->config().to_json(); })
      .def_property_readonly("weights_format", [](const PyModel& pm) { return pm.model->weight_format(); })
      .def_property_readonly("vocab_size", &PyModel::vocab_size)
      .def_property_readonly("parameters", [](const PyModel& pm) { return pm.model->parameters(); })
      .def_property_readonly("fingerprint", [](const PyModel& pm) { return pm.model->fingerprint(); })
      .def_property_readonly("source", [](const PyModel& pm) { return pm.model->source(); })
      .def_property_readonly("eos_token_ids", [](const PyModel& pm) { return pm.model->config().eos_token_ids; })
      .def_property_readonly("threads", [](const PyModel& pm) { return pm.threads; })
      .def_property_readonly("tokenizer", [](const PyModel& pm) { return pm.tokenizer; })
      .def_property_readonly("_files", [](const PyModel& pm) { return pm.files; })
      .def_property_readonly("no_text", [](const PyModel& pm) { return pm.no_text; })
      .def("describe", [](const PyModel& pm) { return pm.model->describe(pm.model->source()); })
      .def("__repr__", [](const PyModel& pm) {
        return fmt::format("<recur.Model {} ({})>", pm.model->source(), pm.model->weight_format());
      })
      .def("new_state",
           [](const std::shared_ptr<PyModel>& pm, int chunk) {
             if (chunk < 1) value_error("Model.new_state", "chunk is {}, expected >= 1", chunk);
             return std::make_shared<PyState>(pm, Decoder(pm->model, options_for(*pm, chunk)));
           },
           py::arg("chunk") = 64)
      .def("_score", &model_score, py::arg("ids"), py::arg("chunk") = 64)
      .def("_render_chat", &render_chat, py::arg("messages_json"), py::arg("tools_json"),
           py::arg("add_generation_prompt"), py::arg("extra_json"))
      .def("_require_text", [](const PyModel& pm, const char* call) { pm.require_text(call); });

  py::class_<PyState, std::shared_ptr<PyState>>(m, "State")
      .def("step", &state_step, py::arg("token"), py::arg("copy") = false)
      .def("prefill", &state_prefill, py::arg("ids"), py::arg("chunk") = py::none(),
           py::arg("all_logits") = false, py::arg("copy") = false)
      .def("clone", &state_clone)
      .def("reset",
           [](PyState& s) {
             py::gil_scoped_release release;
             std::lock_guard<std::mutex> lock(s.mutex);
             s.decoder.reset();
           })
      .def("save",
           [](PyState& s, const std::filesystem::path& path) {
             py::gil_scoped_release release;
             std::lock_guard<std::mutex> lock(s.mutex);
             s.decoder.save(path.string());
           },
           py::arg("path"))
      // step() on every id in one call, nothing returned: the reference that bench/bench_python.py
      // measures Python's overhead per step() against.
      .def("_step_many",
           [](PyState& s, const py::handle& ids_obj) {
             const std::vector<int> ids = token_ids(ids_obj, "State._step_many", "ids");
             const int V = s.owner->vocab_size();
             for (std::size_t i = 0; i < ids.size(); ++i)  // all checked before the first step
               if (ids[i] < 0 || ids[i] >= V)
                 value_error("State._step_many", "ids[{}] is {}, expected 0 to vocab_size - 1 = {}",
                             i, ids[i], V - 1);
             py::gil_scoped_release release;
             std::lock_guard<std::mutex> lock(s.mutex);
             for (const int t : ids) s.decoder.step(t);
           },
           py::arg("ids"))
      .def_static("load", &state_load, py::arg("model"), py::arg("path"), py::arg("chunk") = 64)
      .def_property_readonly("logits",
                             [](const std::shared_ptr<PyState>& s) {
                               const float* data = nullptr;
                               {
                                 std::lock_guard<std::mutex> lock(s->mutex);
                                 data = s->decoder.logits().data();
                               }
                               return logits_array(s, data, false);
                             })
      .def_property_readonly("model", [](const PyState& s) { return s.owner; })
      .def_property_readonly("tokens", [](PyState& s) {
        std::lock_guard<std::mutex> lock(s.mutex);
        return s.decoder.n_tokens();
      })
      .def_property_readonly("nbytes", [](PyState& s) {
        std::lock_guard<std::mutex> lock(s.mutex);
        return s.decoder.state_bytes();
      })
      .def_property_readonly("chunk", [](PyState& s) {
        std::lock_guard<std::mutex> lock(s.mutex);
        return s.decoder.options().chunk;
      })
      .def_property_readonly("failure", [](PyState& s) {
        std::lock_guard<std::mutex> lock(s.mutex);
        return s.decoder.failure();
      });

  py::class_<Generator, std::shared_ptr<Generator>>(m, "_Generator")
      .def(py::init<std::shared_ptr<PyState>, const py::handle&, long long, float, int, float,
                    float, unsigned long long, bool>(),
           py::arg("state"), py::arg("prompt"), py::arg("max_tokens"), py::arg("temperature"),
           py::arg("top_k"), py::arg("top_p"), py::arg("repetition_penalty"), py::arg("seed"),
           py::arg("stop_at_eos"))
      .def("__iter__", [](const std::shared_ptr<Generator>& g) { return g; })
      .def("__next__", &Generator::next)
      .def_property_readonly("finish_reason", &Generator::finish_reason)
      .def_property_readonly("state", &Generator::state);

  m.def("isa", [] { return recur::isa(); });
  m.def("available_isas", [] { return recur::available_isas(); });
  m.def("_quantize", &quantize, py::arg("src"), py::arg("dst"), py::arg("type"),
        py::arg("head") = py::none());
}
