// The tokenizer.json pipeline: added tokens, normalizer, pre-tokenizer, BPE, post-processor on
// the way in; the decoder on the way out. The normalizer, pre-tokenizer and decoder steps are in
// components.cpp, the matching of added tokens in added_tokens.cpp; reading the model, the added
// tokens and the post-processor, and the order of it all, are here. Each stage follows what the
// Hugging Face library does with the same file (docs/tokenizer.md lists the rules and where
// they are subtle).
// RWKV's world vocabulary (world_vocab.cpp) takes the place of the whole pipeline: its ids and
// token bytes fill the same tables, so that decoding, the checks and DecodeStream are shared.
#include "recur/tokenizer.h"
#include "recur/sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include "recur/error.h"
#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/components.h"
#include "text/unicode.h"
#include "text/world_vocab.h"
#include "util/file.h"
#include "util/json.h"

namespace recur {
namespace {

using text::AddedMatcher;
using text::AddedToken;
using text::Part;
using text::Piece;
using text::Reader;

constexpr std::uint64_t kMaxFileBytes = 1ull << 30;  // Gemma-3's is 33 MB; 1 GiB is absurd
constexpr const char* kWorldEndOfText = "<|endoftext|>";  // the name of RWKV's id 0

struct Template {
  // For each item: a fixed list of ids, or the sequence (empty ids and is_sequence).
  struct Item {
    bool is_sequence;
    std::vector<int> ids;
  };
  std::vector<Item> items;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Tokenizer::Impl {
  std::string source;
  std::optional<text::Bpe> bpe;
  text::Normalizers normalizers;
  text::PreTokenizers pre_tokenizers;
  text::Decoders decoders;
  bool has_decoder = false;
  std::vector<Template> post;  // applied in order with add_special_tokens
  std::vector<AddedToken> added;
  AddedMatcher raw_matcher, normalized_matcher;
  std::vector<std::string> id_to_token;  // "" where no token
  // What the decoders see for an id: its token string, except for an added token with
  // normalized: true whose normalized content differs (the library decodes that form, so that
  // Llama's "▁" of a normalized "hello world" comes back as a space).
  std::unordered_map<int, std::string> decode_form;
  const std::string& decoded_token(int id) const {
    if (!decode_form.empty())
      if (const auto it = decode_form.find(id); it != decode_form.end()) return it->second;
    return id_to_token[static_cast<std::size_t>(id)];
  }
  std::vector<char> has_token;
  std::vector<char> special;
  std::unordered_map<std::string, int> added_ids;
  std::optional<std::int64_t> truncate;  // max_length, with direction
  bool truncate_left = false;
  // An RWKV world vocabulary, when that is what was loaded: it encodes, and nothing above runs.
  std::unique_ptr<const text::WorldVocab> world;

  void normalize(std::string& s) const {
    normalizers.apply(s);
  }

  std::vector<int> encode(std::string_view input, bool add_special) const {
    if (const std::size_t bad = text::invalid_utf8_at(input); bad != std::string_view::npos) {
      std::string bytes;
      for (std::size_t k = bad; k < std::min(input.size(), bad + 4); ++k)
        bytes += fmt::format(" {:02x}", static_cast<unsigned char>(input[k]));
      throw ArgumentError(fmt::format("[Tokenizer::encode] text: not UTF-8 at byte {} of {} (bytes{})",
                                      bad, input.size(), bytes));
    }
    if (world) {  // the reference adds nothing, special or not
      std::vector<int> ids;
      ids.reserve(input.size() / 2 + 1);
      world->encode(input, ids);
      return ids;
    }
    std::vector<int> ids = tokenize(split_and_normalize(input), input.size());
    post_process(ids, add_special);
    return ids;
  }

  // 1. Added tokens that match the raw text; 2. the normalizer on each part between them;
  // 3. added tokens that match normalized text.
  std::vector<Part> split_and_normalize(std::string_view input) const {
    std::vector<Part> parts, normalized_parts;
    const Part whole{std::string(input), -1, true};
    if (raw_matcher.empty()) parts.push_back(whole);
    else split_added(whole, raw_matcher, added, parts);
    for (Part& p : parts) {
      if (p.added >= 0) {
        normalized_parts.push_back(std::move(p));
        continue;
      }
      normalize(p.text);
      if (normalized_matcher.empty()) normalized_parts.push_back(std::move(p));
      else split_added(p, normalized_matcher, added, normalized_parts);
    }
    return normalized_parts;
  }

  // 4. Pre-tokenize and 5. run the model on each part that is not an added token. Repeated
  // words are looked up once. `input_bytes` sizes the first allocation.
  std::vector<int> tokenize(const std::vector<Part>& parts, std::size_t input_bytes) const {
    std::vector<int> ids;
    ids.reserve(input_bytes / 3 + 8);
    std::unordered_map<std::string, std::vector<int>> cache;
    std::vector<Piece> pieces;
    for (const Part& p : parts) {
      if (p.added >= 0) {
        ids.push_back(added[static_cast<std::size_t>(p.added)].id);
        continue;
      }
      if (p.text.empty()) continue;  // nothing to pre-tokenize: no prefix space is added to it
      pieces.clear();
      pieces.push_back({p.text, p.at_start});
      pre_tokenizers.apply(pieces);
      for (const Piece& piece : pieces) {
        if (piece.text.size() > 64) {  // long words are rare: not worth keeping
          bpe->encode_word(piece.text, ids);
          continue;
        }
        const auto [it, fresh] = cache.try_emplace(piece.text);
        if (fresh) bpe->encode_word(piece.text, it->second);
        ids.insert(ids.end(), it->second.begin(), it->second.end());
      }
    }
    return ids;
  }

  // 6. Truncation, leaving room for what the post-processor adds; 7. the post-processor.
  void post_process(std::vector<int>& ids, bool add_special) const {
    if (truncate) {
      std::int64_t room = *truncate;
      if (add_special)
        for (const auto& t : post)
          for (const auto& item : t.items) room -= static_cast<std::int64_t>(item.ids.size());
      room = std::max<std::int64_t>(room, 0);
      if (static_cast<std::int64_t>(ids.size()) > room) {
        if (truncate_left) ids.erase(ids.begin(), ids.end() - room);
        else ids.resize(static_cast<std::size_t>(room));
      }
    }
    if (add_special) {
      for (const auto& t : post) {
        std::vector<int> out;
        for (const auto& item : t.items) {
          if (item.is_sequence) out.insert(out.end(), ids.begin(), ids.end());
          else out.insert(out.end(), item.ids.begin(), item.ids.end());
        }
        ids = std::move(out);
      }
    }
  }

  std::string decode(const std::vector<int>& ids, bool skip_special) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const int id : ids) {
      check_id(id, "Tokenizer::decode");
      if (skip_special && special[static_cast<std::size_t>(id)]) continue;
      tokens.push_back(decoded_token(id));
    }
    if (world) {  // bytes: each ill-formed sequence becomes U+FFFD, as Python's errors="replace"
      std::string bytes;
      for (const auto& t : tokens) bytes += t;
      return text::utf8_lossy(bytes);
    }
    if (!has_decoder) {
      std::string out;
      for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
      return out;
    }
    decoders.apply(tokens);
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
  }

  void check_id(int id, const char* call) const {
    if (id < 0 || id >= static_cast<int>(id_to_token.size()) || !has_token[static_cast<std::size_t>(id)])
      throw ArgumentError(fmt::format("[{}] id {} is not in the vocabulary of {} ({} ids)", call,
                                      id, source, id_to_token.size()));
  }
};

namespace {

void read_model(const Reader& r, json::Value& root, Tokenizer::Impl& t) {
  json::Value& m = const_cast<json::Value&>(r.member(root, "tokenizer", "model"));
  const std::string type = r.type(m, "model");
  if (type != "BPE") r.unsupported("model", "model", type);
  if (const json::Value* d = r.optional(m, "dropout"); d && !(d->is_number() && d->number() == 0.0))
    r.fail("model.dropout", "BPE dropout samples a different tokenization each time; recur "
                            "encodes deterministically, as the library does without dropout");
  json::Value& vocab = const_cast<json::Value&>(r.member(m, "model", "vocab"));
  if (!vocab.is_object()) r.fail("model.vocab", "expected an object of token: id");
  std::vector<std::pair<std::string, int>> ids;
  auto members = vocab.take_object();  // the strings move into the model, not copied
  ids.reserve(members.size());
  for (auto& [token, id] : members) {
    if (!id.is_integer() || id.integer() < 0 || id.integer() >= (1 << 24))
      r.fail("model.vocab", fmt::format("the id of {} is not an integer in 0 to {}",
                                        json::quote(token), (1 << 24) - 1));
    ids.emplace_back(std::move(token), static_cast<int>(id.integer()));
  }
  const json::Value& merges_v = r.member(m, "model", "merges");
  if (!merges_v.is_array()) r.fail("model.merges", "expected a list");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_v.array().size());
  for (std::size_t i = 0; i < merges_v.array().size(); ++i) {
    const json::Value& e = merges_v.array()[i];
    if (e.is_string()) {  // "a b": split at the one space; a "#version" line is no merge
      const std::string& s = e.string();
      if (s.compare(0, 8, "#version") == 0) continue;
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.fail(fmt::format("model.merges[{}]", i), fmt::format("{} is not two tokens", json::quote(s)));
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.array().size() == 2 && e.array()[0].is_string() &&
               e.array()[1].is_string()) {  // ["a", "b"]
      merges.emplace_back(e.array()[0].string(), e.array()[1].string());
    } else {
      r.fail(fmt::format("model.merges[{}]", i), "expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  text::BpeOptions o;
  const std::string unk = r.string_or(m, "model", "unk_token", "");
  o.fuse_unk = r.boolean_or(m, "model", "fuse_unk", false);
  o.byte_fallback = r.boolean_or(m, "model", "byte_fallback", false);
  o.ignore_merges = r.boolean_or(m, "model", "ignore_merges", false);
  o.continuing_subword_prefix = r.string_or(m, "model", "continuing_subword_prefix", "");
  o.end_of_word_suffix = r.string_or(m, "model", "end_of_word_suffix", "");
  t.bpe.emplace(std::move(ids), merges, o, fmt::format("[Tokenizer] {}: model", r.source()));
  if (!unk.empty()) {
    const auto id = t.bpe->find(unk);
    if (!id) r.fail("model.unk_token", fmt::format("{} is not in the vocabulary", json::quote(unk)));
    t.bpe->set_unk(*id);
  }
  t.id_to_token = t.bpe->tokens();
  t.has_token = t.bpe->has_token();
}

void read_added(const Reader& r, const json::Value& root, Tokenizer::Impl& t) {
  const json::Value* list = r.optional(root, "added_tokens");
  if (!list) return;
  if (!list->is_array()) r.fail("added_tokens", "expected a list");
  // The library does not take the ids the file gives: it adds the tokens in order, each with
  // the id its content already has (as an added token or in the model's vocabulary), or else
  // the next one from the number of vocabulary entries on. Files it wrote agree; recur assigns
  // the ids the same way so that a file that does not agree tokenizes as in the library too.
  int next_id = static_cast<int>(std::count(t.has_token.begin(), t.has_token.end(), 1));
  const std::size_t model_ids = t.has_token.size();
  for (std::size_t i = 0; i < list->array().size(); ++i) {
    const json::Value& e = list->array()[i];
    const std::string path = fmt::format("added_tokens[{}]", i);
    if (!e.is_object()) r.fail(path, "expected an object");
    const json::Value& id = r.member(e, path, "id");
    if (!id.is_integer() || id.integer() < 0 || id.integer() >= (1 << 24))
      r.fail(path + ".id", "expected an integer in 0 to 2^24 - 1");
    AddedToken a;
    a.content = r.string(e, path, "content");
    if (a.content.empty()) continue;  // the library ignores it
    if (const auto known = t.added_ids.find(a.content); known != t.added_ids.end()) a.id = known->second;
    else if (const auto in_vocab = t.bpe->find(a.content)) a.id = *in_vocab;
    else a.id = next_id++;
    if (static_cast<std::size_t>(a.id) < model_ids && t.has_token[static_cast<std::size_t>(a.id)] &&
        t.id_to_token[static_cast<std::size_t>(a.id)] != a.content)
      r.fail(path, fmt::format("the library gives {} the id {}, which the vocabulary already uses for "
                               "{}: the file's ids are inconsistent",
                               json::quote(a.content), a.id,
                               json::quote(t.id_to_token[static_cast<std::size_t>(a.id)])));
    a.single_word = r.boolean_or(e, path, "single_word", false);
    a.lstrip = r.boolean_or(e, path, "lstrip", false);
    a.rstrip = r.boolean_or(e, path, "rstrip", false);
    a.special = r.boolean_or(e, path, "special", false);
    a.normalized = r.boolean_or(e, path, "normalized", !a.special);
    const auto uid = static_cast<std::size_t>(a.id);
    if (uid >= t.id_to_token.size()) {
      t.id_to_token.resize(uid + 1);
      t.has_token.resize(uid + 1, 0);
    }
    t.id_to_token[uid] = a.content;
    t.has_token[uid] = 1;
    t.added_ids[a.content] = a.id;
    // The same content listed again replaces the earlier entry's flags, as in the library.
    const auto same = std::find_if(t.added.begin(), t.added.end(),
                                   [&](const AddedToken& b) { return b.content == a.content; });
    if (same != t.added.end()) *same = a;
    else t.added.push_back(a);
  }
  t.special.assign(t.id_to_token.size(), 0);
  for (std::size_t i = 0; i < t.added.size(); ++i) {
    AddedToken& a = t.added[i];
    if (a.special) t.special[static_cast<std::size_t>(a.id)] = 1;
    if (a.normalized) {
      std::string n = a.content;
      t.normalize(n);
      if (n != a.content) t.decode_form[a.id] = n;
      a.content = n;
      t.normalized_matcher.add(n, static_cast<int>(i));
    } else {
      t.raw_matcher.add(a.content, static_cast<int>(i));
    }
  }
}

int special_id(const Reader& r, const Tokenizer::Impl& t, const json::Value& pair, const std::string& path) {
  // ["[CLS]", 101]
  if (!pair.is_array() || pair.array().size() != 2 || !pair.array()[1].is_integer())
    r.fail(path, "expected [token, id]");
  const std::int64_t id = pair.array()[1].integer();
  if (id < 0 || id >= static_cast<std::int64_t>(t.id_to_token.size()))
    r.fail(path, fmt::format("id {} is outside the vocabulary", id));
  return static_cast<int>(id);
}

void read_post(const Reader& r, const json::Value& v, const std::string& path, Tokenizer::Impl& t) {
  const std::string type = r.type(v, path);
  if (type == "Sequence") {
    r.each(v, path, "processors",
           [&](const json::Value& e, const std::string& at) { read_post(r, e, at, t); });
  } else if (type == "ByteLevel") {
    // Only offsets change; the ids are left as they are.
  } else if (type == "TemplateProcessing") {
    const json::Value& single = r.member(v, path, "single");
    const json::Value& specials = r.member(v, path, "special_tokens");
    if (!single.is_array()) r.fail(path + ".single", "expected a list");
    Template tpl;
    for (std::size_t i = 0; i < single.array().size(); ++i) {
      const json::Value& item = single.array()[i];
      const std::string ipath = fmt::format("{}.single[{}]", path, i);
      if (const json::Value* s = item.is_object() ? item.find("Sequence") : nullptr) {
        if (r.string(*s, ipath + ".Sequence", "id") != "A")
          r.fail(ipath, "a single-sequence template can only hold sequence A");
        tpl.items.push_back({true, {}});
      } else if (const json::Value* st = item.is_object() ? item.find("SpecialToken") : nullptr) {
        const std::string name = r.string(*st, ipath + ".SpecialToken", "id");
        const json::Value* entry = specials.is_object() ? specials.find(name) : nullptr;
        if (!entry) r.fail(ipath, fmt::format("{} is not in special_tokens", json::quote(name)));
        const json::Value& list = r.member(*entry, path + ".special_tokens." + name, "ids");
        if (!list.is_array()) r.fail(path + ".special_tokens." + name + ".ids", "expected a list");
        Template::Item it{false, {}};
        for (const auto& x : list.array()) {
          if (!x.is_integer() || x.integer() < 0 || x.integer() >= static_cast<std::int64_t>(t.id_to_token.size()))
            r.fail(path + ".special_tokens." + name + ".ids", "holds an id outside the vocabulary");
          it.ids.push_back(static_cast<int>(x.integer()));
        }
        tpl.items.push_back(std::move(it));
      } else {
        r.fail(ipath, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    t.post.push_back(std::move(tpl));
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    Template tpl;
    tpl.items.push_back({false, {special_id(r, t, r.member(v, path, "cls"), path + ".cls")}});
    tpl.items.push_back({true, {}});
    tpl.items.push_back({false, {special_id(r, t, r.member(v, path, "sep"), path + ".sep")}});
    t.post.push_back(std::move(tpl));
  } else {
    r.unsupported(path, "post-processor", type);
  }
}

}  // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

bool Tokenizer::present(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path d(dir);
  return std::filesystem::is_regular_file(d / "tokenizer.json", ec) ||
         std::filesystem::is_regular_file(d / text::WorldVocab::kFileName, ec);
}

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec)) {  // tokenizer.json first, else RWKV's vocabulary
    const std::filesystem::path json = std::filesystem::path(path) / "tokenizer.json";
    const std::filesystem::path world = std::filesystem::path(path) / text::WorldVocab::kFileName;
    file = (!std::filesystem::exists(json, ec) && std::filesystem::exists(world, ec) ? world : json).string();
  }
  const auto text = detail::read_file(file, kMaxFileBytes);
  if (!text)
    throw FormatError(fmt::format("[Tokenizer] {}: cannot read the file (missing, not a regular "
                                  "file, or over {} bytes)", file, kMaxFileBytes));
  // A tokenizer.json is an object; every line of RWKV's vocabulary starts with its id (after a
  // byte-order mark, the vocabulary's reader says why it is refused).
  const std::size_t first = text->compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  if (text->size() > first && (*text)[first] >= '0' && (*text)[first] <= '9')
    return from_rwkv_vocab(*text, file);
  return from_json(*text, file);
}

std::shared_ptr<const Tokenizer> Tokenizer::from_rwkv_vocab(std::string_view vocab_text,
                                                            const std::string& source) {
  std::shared_ptr<Tokenizer> tok(new Tokenizer());
  Impl& t = *tok->impl_;
  t.source = source;
  t.world = std::make_unique<const text::WorldVocab>(vocab_text, source);
  t.id_to_token = t.world->tokens();
  t.id_to_token[0] = kWorldEndOfText;  // a name to show; it decodes to no text
  t.decode_form[0] = "";
  t.has_token.assign(t.id_to_token.size(), 1);
  t.special.assign(t.id_to_token.size(), 0);
  t.special[0] = 1;
  return tok;
}

std::shared_ptr<const Tokenizer> Tokenizer::from_json(std::string_view json_text,
                                                      const std::string& source) {
  const Reader r(source);
  json::Value root = json::parse(json_text, "Tokenizer] " + source + ": [tokenizer.json");
  if (!root.is_object()) r.fail("tokenizer", "the file is not a JSON object");
  std::shared_ptr<Tokenizer> tok(new Tokenizer());
  Impl& t = *tok->impl_;
  t.source = source;
  if (const json::Value* n = r.optional(root, "normalizer")) t.normalizers.read(r, *n, "normalizer");
  if (const json::Value* p = r.optional(root, "pre_tokenizer"))
    t.pre_tokenizers.read(r, *p, "pre_tokenizer");
  read_model(r, root, t);
  read_added(r, root, t);
  t.special.resize(t.id_to_token.size(), 0);
  if (const json::Value* p = r.optional(root, "post_processor")) read_post(r, *p, "post_processor", t);
  if (const json::Value* d = r.optional(root, "decoder")) {
    t.has_decoder = true;
    t.decoders.read(r, *d, "decoder");
  }
  if (const json::Value* tr = r.optional(root, "truncation")) {
    t.truncate = r.integer_or(*tr, "truncation", "max_length", 512, 0, INT64_MAX);
    const std::string dir = r.string_or(*tr, "truncation", "direction", "Right");
    if (dir != "Right" && dir != "Left") r.fail("truncation.direction", "expected Right or Left");
    t.truncate_left = dir == "Left";
  }
  if (const json::Value* pad = r.optional(root, "padding")) {
    const json::Value* strategy = r.optional(*pad, "strategy");
    if (!(strategy && strategy->is_string() && strategy->string() == "BatchLongest"))
      r.fail("padding", "fixed-length padding is not supported (BatchLongest pads nothing for one "
                        "text and is accepted)");
  }
  return tok;
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, add_special_tokens);
}

std::string Tokenizer::decode(const std::vector<int>& ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

int Tokenizer::vocab_size() const { return static_cast<int>(impl_->id_to_token.size()); }

std::optional<int> Tokenizer::token_to_id(std::string_view token) const {
  if (impl_->world) {
    if (const auto id = impl_->world->find(token)) return id;
    return token == kWorldEndOfText ? std::optional<int>(0) : std::nullopt;
  }
  if (const auto it = impl_->added_ids.find(std::string(token)); it != impl_->added_ids.end())
    return it->second;
  return impl_->bpe->find(token);
}

const std::string& Tokenizer::id_to_token(int id) const {
  impl_->check_id(id, "Tokenizer::id_to_token");
  return impl_->id_to_token[static_cast<std::size_t>(id)];
}

bool Tokenizer::world_vocabulary() const { return impl_->world != nullptr; }

bool Tokenizer::has_id(int id) const {
  return id >= 0 && id < vocab_size() && impl_->has_token[static_cast<std::size_t>(id)] != 0;
}

std::shared_ptr<const TokenMask> Tokenizer::sample_mask(int n_ids) const {
  if (n_ids < 1)
    throw ArgumentError(fmt::format("[Tokenizer::sample_mask] n_ids is {}, expected >= 1", n_ids));
  std::vector<char> allowed(static_cast<std::size_t>(n_ids));
  for (int id = 0; id < n_ids; ++id) allowed[static_cast<std::size_t>(id)] = has_id(id) ? 1 : 0;
  if (std::find(allowed.begin(), allowed.end(), 1) == allowed.end())
    throw ArgumentError(fmt::format("[Tokenizer::sample_mask] {} ({} ids) decodes none of a head's "
                                    "{} ids", impl_->source, vocab_size(), n_ids));
  return std::make_shared<const TokenMask>(std::move(allowed));
}

bool Tokenizer::is_special(int id) const {
  return id >= 0 && id < vocab_size() && impl_->special[static_cast<std::size_t>(id)];
}

const std::string& Tokenizer::source() const { return impl_->source; }

std::string Tokenizer::describe() const {
  const Impl& t = *impl_;
  if (t.world)
    return fmt::format("RWKV world vocabulary, {} ids (id 0 ends a text; the longest token is {} "
                       "bytes), greedy longest match over bytes; encoding adds nothing",
                       t.id_to_token.size(), t.world->max_token_bytes());
  const bool byte_level = t.pre_tokenizers.byte_level();
  std::string adds;
  for (const auto& tpl : t.post)
    for (const auto& item : tpl.items)
      for (const int id : item.ids) adds += (adds.empty() ? "" : ", ") + t.id_to_token[static_cast<std::size_t>(id)];
  return fmt::format("BPE, {} ids ({} merges, {} added tokens){}{}; encoding adds {}",
                     t.id_to_token.size(), t.bpe->n_merges(), t.added.size(),
                     byte_level ? ", byte-level" : "",
                     t.bpe->options().byte_fallback ? ", byte fallback" : "",
                     adds.empty() ? std::string("nothing") : adds);
}

// ---------------------------------------------------------------------------------------------

DecodeStream::DecodeStream(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special_tokens) {}

std::string DecodeStream::put(int id) {
  const Tokenizer::Impl& t = *tokenizer_->impl_;
  t.check_id(id, "DecodeStream::put");
  // A skipped special token is no part of the text: decode() drops it before the decoders run,
  // so it must not take the place of the context token either (a Strip would strip twice).
  if (skip_special_ && t.special[static_cast<std::size_t>(id)]) return {};
  window_.push_back(id);
  // A byte-fallback run is decoded as a whole: wait until it has ended.
  if (t.decoders.byte_fallback() && text::Decoders::byte_token(t.decoded_token(id)) >= 0)
    return {};
  const std::string text = tokenizer_->decode(window_, skip_special_);
  // An incomplete UTF-8 sequence at the end decodes as U+FFFD: wait for the rest of it.
  if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return {};
  if (text.compare(0, prefix_text_.size(), prefix_text_) != 0) return {};
  std::string out = text.substr(prefix_text_.size());
  // Keep one token of context: decoders treat the first token specially (a stripped space).
  window_.erase(window_.begin(), window_.end() - 1);
  prefix_text_ = tokenizer_->decode(window_, skip_special_);
  return out;
}

std::string DecodeStream::finish() {
  const std::string text = tokenizer_->decode(window_, skip_special_);
  std::string out = text.compare(0, prefix_text_.size(), prefix_text_) == 0
                        ? text.substr(prefix_text_.size())
                        : text;
  window_.clear();
  prefix_text_.clear();
  return out;
}

}  // namespace recur
