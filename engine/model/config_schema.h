// A family's config.json fields, each declared once: its key, the member that holds it (in
// ModelConfig or in the family's own config struct), its type, default and range, and for a
// field recur does not read, the reason it changes nothing at inference or the one value it is
// accepted at. One table drives reading (through Fields, whose messages name the key and the
// file), writing config.json (to_json, in the table's order) and make-model's options. An object
// nested in config.json (Qwen3.5's text_config) is a table of its own inside the table; a
// default computed from other fields (a width from hidden_size) is a function of those read or
// made before it. docs/adding-a-model.md, "The configuration", shows a family's table.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/config_fields.h"
#include "model/family.h"
#include "recur/model.h"

namespace recur::model {

/// What the table says of one field, for make-model's help, the docs and the tests.
struct FieldSpec {
  enum class Type {
    kInteger, kNumber, kBoolean, kString, kAccepted,
    kObject,     // an object nested in config.json (or a list of them): `members` are its fields
    kLayers,     // a list of layer indices
    kStructure,  // a list or object the family reads and writes in its own code (custom())
    kList,       // a list of names (list()): `choices` are the names
  };
  const char* key = "";
  Type type = Type::kAccepted;
  double min = 0, max = 0;           // kInteger, kNumber: the values read
  std::string fallback;              // the default as config.json writes it ("" for none)
  std::vector<std::string> choices;  // kString, kList: the values read (empty: any)
  /// Why the field changes nothing recur computes (an accepted field, a kernel choice); null
  /// when its value changes inference.
  const char* reason = nullptr;
  const char* option = nullptr;  // make-model's --option that sets it, or null
  bool written = true;           // to_json writes it (when its condition holds)
  bool derived = false;          // its default is computed from other fields (default_from)
  /// Written because the published files carry it, for the other tools that read config.json
  /// (for_other_tools()): it changes nothing recur computes, and the fingerprint leaves it out.
  bool for_other_tools = false;
  std::vector<FieldSpec> members;  // kObject: the nested object's fields
};

/// A field's make-model option: how `recur make-model --name` sets it.
struct MakeField {
  const char* name;        // --name
  const char* help;
  bool flag = false;       // a flag: given sets the field to flag_value
  bool flag_value = true;
  const char* fallback = "";  // a value option's default ("": none, the field is left out)
  double max = 0;             // a value option's largest value (0: the field's)
  /// One of the options the tool itself declares (vocab, hidden, layers, heads, intermediate,
  /// tie-embeddings): always read, never listed among the family's.
  bool common = false;
  bool zero_is_default = false;  // 0 means "not given" (--intermediate 0: the family's rule)
  /// An item of a list option (--lora-ranks 64,64,16,128): its index among `items` integers
  /// between commas; `items` 0 when the option is one value.
  int item = 0, items = 0;
};

/// make-model's list of layer indices --name, "1,6,11", as config.json's [1, 6, 11] (empty:
/// [], when `allow_empty`); ArgumentError for anything but indices of up to 4 digits between
/// commas (config.json's reader checks the range and repeats).
inline std::string layer_indices_option(const MakeOptions& o, const char* name, bool allow_empty) {
  const std::string v = o.str(name);
  const auto refuse = [&](const std::string& why) {
    throw ArgumentError(fmt::format("--{} is {}, expected layer indices such as 1,3{}", name,
                                    json::quote(v), why));
  };
  if (v.empty() && !allow_empty) refuse("");
  for (std::size_t i = 0, j = 0; i < v.size(); i = j + 1) {
    j = std::min(v.find(',', i), v.size());
    const std::string index = v.substr(i, j - i);
    if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) refuse("");
    if (index.size() > 4) refuse(fmt::format(" (layer index {} is too large)", index));
    if (j + 1 == v.size()) refuse("");  // a trailing comma
  }
  return "[" + v + "]";
}

/// Item `m.item` of make-model's list option --name, `m.items` integers between commas
/// ("64,64,16,128"), each in [min, max]; ArgumentError naming the option for any other text.
inline std::int64_t list_option_item(const MakeOptions& o, const MakeField& m, std::int64_t min,
                                     std::int64_t max) {
  const std::string v = o.str(m.name);
  const auto refuse = [&] {
    return ArgumentError(fmt::format("--{} is {}, expected {} integers from {} to {} between commas",
                                     m.name, json::quote(v), m.items, min, max));
  };
  std::vector<std::int64_t> values;
  for (std::size_t i = 0, j = 0; i <= v.size() && values.size() <= std::size_t(m.items); i = j + 1) {
    j = std::min(v.find(',', i), v.size());
    const std::string item = v.substr(i, j - i);
    if (item.empty() || item.size() > 9 || item.find_first_not_of("0123456789") != std::string::npos)
      throw refuse();
    values.push_back(std::stoll(item));
    if (values.back() < min || values.back() > max) throw refuse();
  }
  if (values.size() != std::size_t(m.items)) throw refuse();
  return values[std::size_t(m.item)];
}

/// A block of config.json holding one object or a list of them (Schema::objects): the objects
/// as read, and the form to write them back in.
template <class S>
struct ObjectBlock {
  std::vector<S> specs;
  bool present = false;  // config.json has the block (perhaps an empty list)
  bool is_list = false;
};

template <class F>
class Schema;

/// Reads `v`, one object or a list of them, called `owner` in messages ("attn", then
/// "attn[1]"), each through `inner` (which sees the configuration `c`, read before it) and
/// refused any other field, `why` ending that message.
template <class S>
void read_objects(const json::Value& v, const std::string& source, const std::string& owner,
                  const Schema<S>& inner, const char* why, ModelConfig& c, ObjectBlock<S>& out);
/// The block as config.json's value: an object, or a list of them, as it was read.
template <class S>
std::string objects_text(const Schema<S>& inner, const ModelConfig& c, const ObjectBlock<S>& block);

/// F: the family's config struct (a FamilyConfig). A field lives in ModelConfig (vocab_size,
/// hidden_size, ...: what generic code reads) or in F; the member pointer says which.
template <class F>
class Schema {
 public:
  using When = std::function<bool(const ModelConfig&, const F&)>;
  /// A value computed from the fields read (or made) before it.
  using Derive = std::function<double(const ModelConfig&, const F&)>;
  /// A field's value from its make-model option's (a head size to a ratio of widths).
  using Convert = std::function<double(double option, const ModelConfig&, const F&)>;
  /// make-model's value of a field no option sets, from the options and the fields made (a
  /// head count from a width and a head size).
  using Made = std::function<double(const MakeOptions&, const ModelConfig&, const F&)>;
  using MadeText = std::function<std::string(const MakeOptions&, const ModelConfig&, const F&)>;

  /// An integer field in [min, max].
  template <class O>
  Schema& integer(const char* key, int O::*member, int fallback, int min, int max) {
    Entry e = entry(key, FieldSpec::Type::kInteger, config_number(fallback));
    e.spec.min = min;
    e.spec.max = max;
    e.read = [=](Fields& f, ModelConfig& c, F& g) { at<O>(c, g).*member = f.integer(key, fallback, min, max); };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) { w.number(key, at<O>(c, g).*member); };
    e.assign = [=](ModelConfig& c, F& g, double v) { at<O>(c, g).*member = int(v); };
    e.option_value = [=](const MakeOptions& o, const MakeField& m) {
      const std::int64_t top = m.max > 0 ? std::int64_t(m.max) : max;
      if (m.items > 0) return double(list_option_item(o, m, min, top));
      return double(o.integer(m.name, m.zero_is_default ? 0 : min, top));
    };
    return add(std::move(e));
  }
  /// A number field in [min, max].
  template <class O>
  Schema& number(const char* key, double O::*member, double fallback, double min, double max) {
    Entry e = entry(key, FieldSpec::Type::kNumber, config_number(fallback));
    e.spec.min = min;
    e.spec.max = max;
    e.read = [=](Fields& f, ModelConfig& c, F& g) { at<O>(c, g).*member = f.number(key, fallback, min, max); };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) { w.number(key, at<O>(c, g).*member); };
    e.assign = [=](ModelConfig& c, F& g, double v) { at<O>(c, g).*member = v; };
    e.option_value = [=](const MakeOptions& o, const MakeField& m) {
      return o.real(m.name, min, m.max > 0 ? m.max : max);
    };
    return add(std::move(e));
  }
  /// A true / false field.
  template <class O>
  Schema& boolean(const char* key, bool O::*member, bool fallback) {
    Entry e = entry(key, FieldSpec::Type::kBoolean, config_bool(fallback));
    e.read = [=](Fields& f, ModelConfig& c, F& g) { at<O>(c, g).*member = f.boolean(key, fallback); };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) { w.boolean(key, at<O>(c, g).*member); };
    e.assign = [=](ModelConfig& c, F& g, double v) { at<O>(c, g).*member = v != 0; };
    return add(std::move(e));
  }
  /// A field whose string names a value of the member's type: `names` pairs each value with its
  /// name in config.json; another string is refused, naming the key and the names read.
  template <class O, class T>
  Schema& choice(const char* key, T O::*member, T fallback, std::vector<std::pair<T, const char*>> names,
                 const char* note = "") {
    return named(key, member, fallback, std::move(names), note, false);
  }
  /// A choice whose null (or absence) is the value `if_null`, which no name stands for: written
  /// as null (fla's feature_map: null is no activation).
  template <class O, class T>
  Schema& choice_or_null(const char* key, T O::*member, T if_null,
                         std::vector<std::pair<T, const char*>> names) {
    return named(key, member, if_null, std::move(names), "", true);
  }
  /// A true / false field whose null is a value of its own, apart from its absence (fla's
  /// elementwise_affine: absent is true, null no weight, as RMSNorm(elementwise_affine=None)).
  template <class O>
  Schema& boolean_or_null(const char* key, bool O::*member, bool fallback, bool if_null) {
    Entry e = entry(key, FieldSpec::Type::kBoolean, config_bool(fallback));
    e.read = [=](Fields& f, ModelConfig& c, F& g) {
      bool& out = at<O>(c, g).*member;
      const json::Value* v = f.get(key);
      if (!v) {
        out = f.is_null(key) ? if_null : fallback;
        return;
      }
      if (!v->is_bool())
        config_fail(f.source(), "{} is {}, expected true, false or null", f.name(key), describe_json(*v));
      out = v->boolean();
    };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) { w.boolean(key, at<O>(c, g).*member); };
    e.assign = [=](ModelConfig& c, F& g, double v) { at<O>(c, g).*member = v != 0; };
    return add(std::move(e));
  }
  /// An integer field in [min, max] whose null (or absence) is `if_null`, a value outside the
  /// range: written as null (a window_size of null is full attention).
  template <class O>
  Schema& integer_or_null(const char* key, int O::*member, int if_null, int min, int max) {
    Entry e = entry(key, FieldSpec::Type::kInteger, "null");
    e.spec.min = min;
    e.spec.max = max;
    e.read = [=](Fields& f, ModelConfig& c, F& g) { at<O>(c, g).*member = f.integer(key, if_null, min, max); };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) {
      const int v = at<O>(c, g).*member;
      w.add(key, v == if_null ? "null" : config_number(v));
    };
    e.assign = [=](ModelConfig& c, F& g, double v) { at<O>(c, g).*member = int(v); };
    e.option_value = [=](const MakeOptions& o, const MakeField& m) {
      return double(o.integer(m.name, min, m.max > 0 ? std::int64_t(m.max) : max));
    };
    return add(std::move(e));
  }
  /// A number field in [min, max] or null (absent or null: no value); written as it.
  template <class O>
  Schema& number_or_null(const char* key, std::optional<double> O::*member, double min, double max) {
    Entry e = entry(key, FieldSpec::Type::kNumber, "null");
    e.spec.min = min;
    e.spec.max = max;
    e.read = [=](Fields& f, ModelConfig& c, F& g) {
      std::optional<double>& out = at<O>(c, g).*member;
      const json::Value* v = f.get(key);
      out.reset();
      if (!v) return;
      if (!v->is_number() || !(v->number() >= min && v->number() <= max))
        config_fail(f.source(), "{} is {}, expected null or a number in {} to {}", f.name(key),
                    describe_json(*v), min, max);
      out = v->number();
    };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) {
      const std::optional<double>& v = at<O>(c, g).*member;
      w.add(key, v ? config_number(*v) : "null");
    };
    return add(std::move(e));
  }
  /// A list of distinct layer indices, each below the model's num_hidden_layers (read before
  /// it), which messages call `count` ("n_layer"); absent or null is none. Its make-model
  /// option takes "1,6,11".
  template <class O>
  Schema& layers(const char* key, std::vector<int> O::*member, const char* count) {
    Entry e = entry(key, FieldSpec::Type::kLayers, "[]");
    e.read = [=](Fields& f, ModelConfig& c, F& g) {
      std::vector<int>& out = at<O>(c, g).*member;
      out.clear();
      const json::Value* v = f.get(key);
      if (!v) return;
      if (!v->is_array())
        config_fail(f.source(), "{} is {}, expected a list of layer indices", f.name(key), v->kind_name());
      for (const auto& l : v->array()) {
        if (!l.is_integer() || l.integer() < 0 || l.integer() >= c.num_hidden_layers)
          config_fail(f.source(), "{} holds {}, expected layer indices 0 to {} - 1 = {}", f.name(key),
                      describe_json(l), count, c.num_hidden_layers - 1);
        const int i = static_cast<int>(l.integer());
        if (std::find(out.begin(), out.end(), i) != out.end())
          config_fail(f.source(), "{} names layer {} twice", f.name(key), i);
        out.push_back(i);
      }
    };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) {
      std::string text = "[";
      for (const int l : at<O>(c, g).*member) text += (text.size() > 1 ? ", " : "") + std::to_string(l);
      w.add(key, text + "]");
    };
    e.option_text = [](const MakeOptions& o, const char* name) {
      return layer_indices_option(o, name, true);
    };
    return add(std::move(e));
  }
  /// A block holding one object or a list of them (fla's `attn`), each read by `inner` (which
  /// sees the model's configuration, read before it) and refused any other field, `why` ending
  /// that message; written back in the form it was read in, when present. make-model writes
  /// one object from `inner`'s options (made_object).
  template <class O, class B, class S>
  Schema& objects(const char* key, B O::*member, const Schema<S>& inner, const char* why) {
    Entry e = entry(key, FieldSpec::Type::kObject, "");
    e.spec.members = inner.fields();
    const Schema<S>* schema = &inner;
    e.read = [=](Fields& f, ModelConfig& c, F& g) {
      ObjectBlock<S>& out = at<O>(c, g).*member;
      if (const json::Value* v = f.get(key)) {
        read_objects(*v, f.source(), f.name(key), *schema, why, c, out);
      } else {
        out = ObjectBlock<S>{};
      }
    };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) {
      const ObjectBlock<S>& block = at<O>(c, g).*member;
      if (block.present) w.add(key, objects_text(*schema, c, block));
    };
    e.block_options = [schema](const std::vector<std::string>& archs) {
      return schema->make_options(archs);
    };
    e.make_block = [schema](const MakeOptions& o, const ModelConfig& c) {
      return schema->made_object(o, c);
    };
    return add(std::move(e));
  }
  /// A field read as one string value, the only one this layout has (hidden_act "sqrelu"):
  /// written as it, any other refused with `refusal` ending the message.
  Schema& fixed(const char* key, const char* value, const char* refusal) {
    Entry e = entry(key, FieldSpec::Type::kString, json::quote(value));
    e.spec.choices = {value};
    const std::string v = value;
    e.read = [=](Fields& f, ModelConfig&, F&) {
      const std::string s = f.string(key, v);
      if (s != v) config_fail(f.source(), "{} is '{}': {}", f.name(key), s, refusal);
    };
    e.write = [=](FieldWriter& w, const ModelConfig&, const F&) { w.string(key, v); };
    return add(std::move(e));
  }
  /// A string field whose every value in `values` computes the same function (a kernel choice):
  /// checked, not stored, written as `written`; another string is refused naming the values.
  Schema& same_function(const char* key, std::vector<std::string> values, const char* written,
                        const char* reason) {
    Entry e = entry(key, FieldSpec::Type::kString, json::quote(written));
    e.spec.choices = values;
    e.spec.reason = reason;
    const std::string fallback = written;
    e.read = [=](Fields& f, ModelConfig&, F&) {
      const std::string s = f.string(key, fallback);
      for (const auto& v : values)
        if (s == v) return;
      config_fail(f.source(), "{} is '{}', expected {}", f.name(key), s, one_of(values));
    };
    e.write = [=](FieldWriter& w, const ModelConfig&, const F&) { w.string(key, fallback); };
    return add(std::move(e));
  }
  /// A field whose one value is `json_text` (rms_norm `true`, rotary_emb_fraction `1`), also
  /// when absent: written as it; another is refused, `refusal` ending the message.
  Schema& fixed_json(const char* key, const char* json_text, const char* refusal) {
    Entry e = entry(key, FieldSpec::Type::kAccepted, json_text);
    const std::string text = json_text;
    e.read = [=](Fields& f, ModelConfig&, F&) {
      const json::Value* v = f.get(key);
      if (v && describe_json(*v) != text)
        config_fail(f.source(), "{} is {}: {}", f.name(key), describe_json(*v), refusal);
    };
    e.write = [=](FieldWriter& w, const ModelConfig&, const F&) { w.add(key, text); };
    return add(std::move(e));
  }
  /// A string field whose values `accepts` approves all say one thing (a hydra _target_ naming
  /// a class by a module path that may differ): written as `value`; another is refused,
  /// `refusal` ending the message.
  Schema& fixed_when(const char* key, const char* value, std::function<bool(const std::string&)> accepts,
                     const char* refusal) {
    Entry e = entry(key, FieldSpec::Type::kString, json::quote(value));
    e.spec.choices = {value};
    const std::string v = value;
    e.read = [=](Fields& f, ModelConfig&, F&) {
      const std::string s = f.string(key, v);
      if (!accepts(s)) config_fail(f.source(), "{} is '{}': {}", f.name(key), s, refusal);
    };
    e.write = [=](FieldWriter& w, const ModelConfig&, const F&) { w.string(key, v); };
    return add(std::move(e));
  }
  /// A field recur accepts without reading it: `reason` says why it changes nothing computed.
  Schema& accepted(const char* key, const char* reason) {
    Entry e = entry(key, FieldSpec::Type::kAccepted, "");
    e.spec.reason = reason;
    e.spec.written = false;
    e.read = [=](Fields& f, ModelConfig&, F&) { f.accept(key, reason); };
    return add(std::move(e));
  }
  /// A field accepted at the values `changes_nothing` approves (Fields::accept_when).
  Schema& accepted_when(const char* key, std::function<bool(const json::Value&)> changes_nothing,
                        const char* reason, const char* refusal) {
    Entry e = entry(key, FieldSpec::Type::kAccepted, "");
    e.spec.reason = reason;
    e.spec.written = false;
    e.read = [=](Fields& f, ModelConfig&, F&) { f.accept_when(key, changes_nothing, reason, refusal); };
    return add(std::move(e));
  }
  /// A field config.json must carry as this text (model_type, architectures): written only.
  Schema& written(const char* key, std::string json_text) {
    Entry e = entry(key, FieldSpec::Type::kAccepted, json_text);
    e.write = [=](FieldWriter& w, const ModelConfig&, const F&) { w.add(key, json_text); };
    return add(std::move(e));
  }
  /// An object nested in config.json whose fields are `fields`' (Qwen3.5's text_config, a
  /// rope_parameters): read when present (messages name its fields "key.field", and a field it
  /// does not declare is refused, `unknown` ending the message), written on one line, and its
  /// make-model options made inside it.
  Schema& object(const char* key, Schema fields, const char* unknown) {
    Entry e = entry(key, FieldSpec::Type::kObject, "");
    e.spec.members = fields.fields();
    e.nested = std::make_shared<const Schema>(std::move(fields));
    const std::shared_ptr<const Schema> inner = e.nested;
    e.read = [=](Fields& f, ModelConfig& c, F& g) {
      const json::Value* v = f.get(key);
      if (!v) return;
      if (!v->is_object())
        config_fail(f.source(), "{} is {}, expected an object", f.name(key), describe_json(*v));
      Fields own(*v, f.source(), f.name(key));
      inner->read(own, c, g);
      own.reject_unknown(unknown);
    };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) {
      FieldWriter own;
      inner->write(own, c, g);
      if (!own.empty()) w.add(key, own.object());
    };
    return add(std::move(e));
  }
  /// A field whose value is a structure (a list of layer kinds, a list of objects) the family
  /// reads and writes in its own functions, in the table's place; either may be null.
  Schema& custom(const char* key, std::function<void(Fields&, ModelConfig&, F&)> read,
                 std::function<void(FieldWriter&, const ModelConfig&, const F&)> write) {
    Entry e = entry(key, FieldSpec::Type::kStructure, "");
    e.read = std::move(read);
    e.write = std::move(write);
    e.spec.written = e.write != nullptr;
    return add(std::move(e));
  }
  /// A list of names, each a value of T (layer_types), as many as the field `length_key` (read
  /// before it, at `length`) says: another name, another count or no list is refused naming the
  /// key. Absent, the member is left as it was (the family says what that means).
  template <class O, class T>
  Schema& list(const char* key, std::vector<T> O::*member,
               std::vector<std::pair<T, const char*>> names, int ModelConfig::*length,
               const char* length_key) {
    Entry e = entry(key, FieldSpec::Type::kList, "");
    for (const auto& n : names) e.spec.choices.push_back(n.second);
    const std::vector<std::string> choices = e.spec.choices;
    e.read = [=](Fields& f, ModelConfig& c, F& g) {
      const json::Value* v = f.get(key);
      if (!v) return;
      if (!v->is_array() || v->array().size() != std::size_t(c.*length))
        config_fail(f.source(), "{} is {}, expected {} entries ({})", f.name(key),
                    describe_json(*v), c.*length, length_key);
      std::vector<T> out;
      for (const json::Value& item : v->array()) {
        const auto named = [&](const std::pair<T, const char*>& n) {
          return item.is_string() && item.string() == n.second;
        };
        const auto found = std::find_if(names.begin(), names.end(), named);
        if (found == names.end())
          config_fail(f.source(), "{} holds {}, expected {}", f.name(key), describe_json(item),
                      one_of(choices));
        out.push_back(found->first);
      }
      at<O>(c, g).*member = std::move(out);
    };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) {
      std::string items;
      for (const T& value : at<O>(c, g).*member)
        items += (items.empty() ? "" : ", ") + json::quote(name_of(names, value));
      w.add(key, "[" + items + "]");
    };
    return add(std::move(e));
  }
  /// Every field of `other`, in its order (fields two layouts share, at different places).
  Schema& include(const Schema& other) {
    entries_.insert(entries_.end(), other.entries_.begin(), other.entries_.end());
    return *this;
  }

  // Modifiers of the field declared last.
  /// Read and written only when `when` holds (another layout of the family has other fields);
  /// for reading, `when` sees the fields read before it.
  Schema& only_when(When when) {
    last().when = std::move(when);
    return *this;
  }
  /// Written only when `when` holds (read whatever the layout).
  Schema& written_when(When when) {
    last().write_when = std::move(when);
    return *this;
  }
  /// Read, never written (a field whose value is the same function whatever it says, and that
  /// config.json need not carry).
  Schema& not_written() {
    last().write = nullptr;
    last().spec.written = false;
    return *this;
  }
  /// Refused when absent or null ("attn.num_heads is missing").
  Schema& required() {
    const char* key = last().spec.key;
    last().spec.fallback.clear();
    if (last().spec.type == FieldSpec::Type::kLayers)
      last().option_text = [](const MakeOptions& o, const char* name) {
        return layer_indices_option(o, name, false);
      };
    last().read = [key, read = last().read](Fields& f, ModelConfig& c, F& g) {
      if (!f.get(key)) config_fail(f.source(), "{} is missing", f.name(key));
      read(f, c, g);
    };
    return *this;
  }
  /// Written, never read: the family reads it in its own code (a field whose null means
  /// something, or one read before the table).
  Schema& read_apart() {
    last().read = nullptr;
    return *this;
  }
  /// When config.json does not give the field (an integer, number or boolean), its value is
  /// `value` of the fields read before it (fla's num_v_heads: num_heads) instead of the default.
  Schema& default_from(Derive value) {
    last().read_default = std::move(value);
    last().spec.derived = true;
    return *this;
  }
  /// Written as this JSON text whatever was read (a kernel choice fla records: "fused_chunk").
  Schema& written_as(std::string json_text) {
    const char* key = last().spec.key;
    last().spec.written = true;
    last().write = [key, json_text](FieldWriter& w, const ModelConfig&, const F&) { w.add(key, json_text); };
    return *this;
  }
  /// Written as the JSON text `text` computes (a custom() field; a field recur accepts, written
  /// as the value the rest of the configuration implies).
  Schema& written_as(std::function<std::string(const ModelConfig&, const F&)> text) {
    const char* key = last().spec.key;
    last().spec.written = true;
    last().write = [key, text](FieldWriter& w, const ModelConfig& c, const F& g) {
      w.add(key, text(c, g));
    };
    return *this;
  }
  /// Written for the other tools that read config.json (llama.cpp's converter), as the
  /// published files carry it (when `when` holds; null: always): left out of the text the
  /// model's fingerprint hashes, so that saved states of the configuration as recur wrote it
  /// before still load.
  Schema& for_other_tools(When when = nullptr) {
    last().spec.for_other_tools = true;
    last().tools_when = std::move(when);
    return *this;
  }
  /// make-model's --name sets the field when given (a value option, range-checked as the
  /// field, or up to `max` when that is positive), or always to `fallback` when that is not
  /// empty (make-model's own default).
  Schema& option(const char* name, const char* help, const char* fallback = "", double max = 0) {
    last().spec.option = name;
    last().make_field = MakeField{name, help, false, true, fallback, max};
    return *this;
  }
  /// make-model's --name sets the field when given; otherwise its value is `derived` of the
  /// fields made before it (a width from hidden_size). `to_field`, when set, turns the option's
  /// value (given or derived) into the field's (a head size into fla's expand_v).
  Schema& option(const char* name, const char* help, Derive derived, Convert to_field = nullptr) {
    option(name, help);
    last().make_default = std::move(derived);
    last().make_convert = std::move(to_field);
    return *this;
  }
  /// One of make-model's common options (--vocab, --hidden, --layers, --heads, --intermediate)
  /// sets the field; with `zero_is_default`, its 0 leaves the field to `derived` (when set) or
  /// out of config.json. `to_field`, when set, turns the option's value into the field's (RWKV-7's
  /// head_dim from --heads).
  Schema& common_option(const char* name, bool zero_is_default = false, Derive derived = nullptr,
                        Convert to_field = nullptr) {
    option(name, "");
    last().make_field.common = true;
    last().make_field.zero_is_default = zero_is_default;
    last().make_default = std::move(derived);
    last().make_convert = std::move(to_field);
    return *this;
  }
  /// make-model's list option --name, `count` integers between commas, sets the field with its
  /// item `index` (range-checked as the field); `help` is the option's, on one of its items.
  Schema& option_item(const char* name, int index, int count, const char* help = "") {
    option(name, help);
    last().make_field.item = index;
    last().make_field.items = count;
    return *this;
  }
  /// make-model writes the field, which no option sets, as `value` of the options and of the
  /// fields made (all options' values are set before any such value is made).
  Schema& made_from(Made value) {
    last().made = std::move(value);
    return *this;
  }
  /// make-model writes the field as this JSON text: always, or, after flag(), when the flag is
  /// given (Granite's --multipliers, one flag over several fields).
  Schema& made_as(std::string json_text) {
    if (last().make_field.name) {
      last().option_text = [json_text](const MakeOptions&, const char*) { return json_text; };
    } else {
      last().made_text = [json_text](const MakeOptions&, const ModelConfig&, const F&) {
        return json_text;
      };
    }
    return *this;
  }
  /// make-model writes the field, which no option sets, as the JSON text `text` makes of the
  /// options and the fields made (LFM2's layer_types from --full-attention-interval).
  Schema& made_as(MadeText text) {
    last().made_text = std::move(text);
    return *this;
  }
  /// make-model writes the field only when `when` holds of its options (a layout's form that a
  /// flag picks); its value is made either way, for the fields after it.
  Schema& made_when(std::function<bool(const MakeOptions&)> when) {
    last().made_when = std::move(when);
    return *this;
  }
  /// make-model writes the field as config.json does, with no option (a class name the reader
  /// requires: a mixer spec's _target_).
  Schema& made_as_written() {
    last().made_as_written = true;
    return *this;
  }
  /// make-model's --name is a flag that sets the boolean field to `value`.
  Schema& flag(const char* name, const char* help, bool value = true) {
    last().spec.option = name;
    last().make_field = MakeField{name, help, true, value};
    return *this;
  }
  /// The field's JSON text from its make-model option or flag, for a field no numeric rule makes
  /// (a list given as letters, a name a flag picks); after option() or flag().
  Schema& made_by(std::function<std::string(const MakeOptions&, const char* name)> text) {
    last().option_text = std::move(text);
    return *this;
  }
  /// make-model's common flag --name (--tie-embeddings) sets the boolean field, written either
  /// way (false when not given: some layouts' default is true).
  Schema& common_flag(const char* name) {
    flag(name, "");
    last().make_field.common = true;
    return *this;
  }

  /// Reads every field the table declares, in its order.
  void read(Fields& f, ModelConfig& c, F& g) const {
    for (const Entry& e : entries_) {
      if (!e.read || (e.when && !e.when(c, g))) continue;
      if (e.read_default && !f.has(e.spec.key)) {
        f.get(e.spec.key);  // a null is read too
        e.assign(c, g, e.read_default(c, g));
      } else {
        e.read(f, c, g);
      }
    }
  }
  /// Writes every written field, in the table's order; for the fingerprint, not those written
  /// for other tools.
  void write(FieldWriter& w, const ModelConfig& c, const F& g, bool fingerprint = false) const {
    for (const Entry& e : entries_) {
      if (!e.write || (e.when && !e.when(c, g)) || (e.write_when && !e.write_when(c, g))) continue;
      if (fingerprint && e.spec.for_other_tools && (!e.tools_when || e.tools_when(c, g))) continue;
      if (e.nested && fingerprint) {
        FieldWriter own;
        e.nested->write(own, c, g, true);
        if (!own.empty()) w.add(e.spec.key, own.object());
        continue;
      }
      e.write(w, c, g);
    }
  }
  /// make-model's options of the fields that have one, each serving `archs` (empty: all).
  std::vector<MakeOption> make_options(const std::vector<std::string>& archs = {}) const {
    std::vector<MakeOption> out;
    const auto add_once = [&](MakeOption o) {  // an option over several fields is listed once
      for (const MakeOption& listed : out)
        if (std::string(listed.name) == o.name) return;
      out.push_back(std::move(o));
    };
    for (const Entry& e : entries_) {
      if (e.nested)
        for (auto& o : e.nested->make_options(archs)) add_once(std::move(o));
      if (e.block_options)
        for (auto& o : e.block_options(archs)) add_once(std::move(o));
      const MakeField& m = e.make_field;
      if (m.name && !m.common) add_once({m.name, m.flag ? nullptr : m.fallback, m.help, m.flag, archs});
    }
    return out;
  }
  /// config.json's text of the fields make-model's options set (given, defaulted or derived), as
  /// `"key": value` items joined by ", " (the family adds model_type). only_when() does not
  /// apply here: a table of several layouts puts each option on its layout's entry, and
  /// made_when() says which fields a flag's form writes.
  std::string make_fields(const MakeOptions& o) const {
    ModelConfig c;
    F g;
    FieldWriter w;
    make(o, c, g, w);
    return w.items();
  }
  /// An object block's JSON text from make-model's options (fla's `attn` from --attn-layers
  /// and the rest), "" when the option of its first field is not given, in a configuration
  /// made so far as `c`; ArgumentError when another of its options is given without that one.
  std::string made_object(const MakeOptions& o, const ModelConfig& c) const {
    std::vector<const char*> names;
    for (const Entry& e : entries_)
      if (e.make_field.name) names.push_back(e.make_field.name);
    if (names.empty()) return "";
    if (!o.given(names[0])) {
      std::vector<std::string> others;
      bool given = false;
      for (std::size_t i = 1; i < names.size(); ++i) {
        others.push_back(fmt::format("--{}", names[i]));
        given = given || o.given(names[i]);
      }
      if (given)
        throw ArgumentError(fmt::format("{} {} --{}", all_of(others),
                                        others.size() == 1 ? "needs" : "need", names[0]));
      return "";
    }
    ModelConfig made = c;
    F g;
    FieldWriter w;
    make(o, made, g, w);
    return w.object();
  }
  /// Every field, in the table's order (an object's fields as its members).
  std::vector<FieldSpec> fields() const {
    std::vector<FieldSpec> out;
    for (const Entry& e : entries_) out.push_back(e.spec);
    return out;
  }

 private:
  struct Entry {
    FieldSpec spec;
    When when, write_when, tools_when;
    std::function<void(Fields&, ModelConfig&, F&)> read;
    std::function<void(FieldWriter&, const ModelConfig&, const F&)> write;
    std::shared_ptr<const Schema> nested;  // an object's own table
    // A number's, integer's or boolean's member set from a derived or made value.
    std::function<void(ModelConfig&, F&, double)> assign;
    Derive read_default, make_default;
    Convert make_convert;
    // make-model's value of a numeric option, or the JSON text of a string one.
    std::function<double(const MakeOptions&, const MakeField&)> option_value;
    std::function<std::string(const MakeOptions&, const char*)> option_text;
    MakeField make_field{nullptr, nullptr};
    bool made_as_written = false;
    Made made;           // made_from()
    MadeText made_text;  // made_as() on a field no option sets
    std::function<bool(const MakeOptions&)> made_when;
    // An object block's (objects()) options, and its text made from them.
    std::function<std::vector<MakeOption>(const std::vector<std::string>&)> block_options;
    std::function<std::string(const MakeOptions&, const ModelConfig&)> make_block;
  };

  // Writes into `w` the fields make-model's options set, and into c and g the numbers among
  // them. Every option's value is set first, so that a derived default or a made_from() value
  // reads the options of fields after it as well as those before.
  void make(const MakeOptions& o, ModelConfig& c, F& g, FieldWriter& w) const {
    FieldWriter ignored;
    make_pass(o, c, g, ignored, false);
    make_pass(o, c, g, w, true);
  }

  // One pass over the table: with `derive`, the derived and made values too.
  void make_pass(const MakeOptions& o, ModelConfig& c, F& g, FieldWriter& out, bool derive) const {
    FieldWriter unwritten;
    for (const Entry& e : entries_) {
      FieldWriter& w = e.made_when && !e.made_when(o) ? unwritten : out;
      if (e.nested) {
        FieldWriter own;
        e.nested->make_pass(o, c, g, own, derive);
        if (!own.empty()) w.add(e.spec.key, own.object());
        continue;
      }
      if (e.made_as_written) {
        e.write(w, c, g);
        continue;
      }
      if (e.make_block) {
        if (!derive) continue;
        if (const std::string block = e.make_block(o, c); !block.empty()) w.add(e.spec.key, block);
        continue;
      }
      if (e.made_text) {
        if (derive) w.add(e.spec.key, e.made_text(o, c, g));
        continue;
      }
      if (e.made) {
        if (!derive) continue;
        const double value = e.made(o, c, g);
        if (e.assign) e.assign(c, g, value);  // a custom() field holds it in its own code
        w.number(e.spec.key, value);
        continue;
      }
      const MakeField& m = e.make_field;
      if (!m.name) continue;
      if (m.flag) {
        const bool given = o.flag(m.name);
        if (!given && !m.common) continue;
        if (e.option_text) {
          if (given) w.add(e.spec.key, e.option_text(o, m.name));
          continue;
        }
        const bool value = given ? m.flag_value : !m.flag_value;
        e.assign(c, g, value);
        w.boolean(e.spec.key, value);
        continue;
      }
      const bool read_option = m.common || o.given(m.name) || *m.fallback;
      if (e.option_text) {
        if (read_option) w.add(e.spec.key, e.option_text(o, m.name));
        continue;
      }
      if (!e.option_value) continue;  // a value option on a field that takes none
      double value = read_option ? e.option_value(o, m) : 0;
      const bool set = read_option && !(m.zero_is_default && value == 0);
      if (!set && (!e.make_default || !derive)) continue;
      if (!set) value = e.make_default(c, g);
      if (e.make_convert) value = e.make_convert(value, c, g);
      e.assign(c, g, value);
      w.number(e.spec.key, value);
    }
  }

  // choice() and choice_or_null(): `nullable` makes null (and absence) `fallback`.
  template <class O, class T>
  Schema& named(const char* key, T O::*member, T fallback, std::vector<std::pair<T, const char*>> names,
                const char* note, bool nullable) {
    Entry e = entry(key, FieldSpec::Type::kString, nullable ? "null" : json::quote(name_of(names, fallback)));
    if (nullable) e.spec.choices.push_back("null");
    for (const auto& n : names) e.spec.choices.push_back(n.second);
    const std::vector<std::string> choices = e.spec.choices;
    e.read = [=](Fields& f, ModelConfig& c, F& g) {
      T& out = at<O>(c, g).*member;
      if (nullable && !f.get(key)) {
        out = fallback;
        return;
      }
      const std::string s = f.string(key, name_of(names, fallback));
      for (const auto& n : names)
        if (s == n.second) {
          out = n.first;
          return;
        }
      config_fail(f.source(), "{} is '{}', expected {}{}", f.name(key), s, one_of(choices), note);
    };
    e.write = [=](FieldWriter& w, const ModelConfig& c, const F& g) {
      const T& v = at<O>(c, g).*member;
      if (nullable && v == fallback)
        w.add(key, "null");
      else
        w.string(key, name_of(names, v));
    };
    e.option_text = [](const MakeOptions& o, const char* name) { return json::quote(o.str(name)); };
    return add(std::move(e));
  }

  // The object a member pointer of O points into: the configuration or the family's fields.
  template <class O, class C, class G>
  static auto& at(C& c, G& g) {
    if constexpr (std::is_same_v<O, ModelConfig>) {
      (void)g;
      return c;
    } else {
      static_assert(std::is_same_v<O, F>, "a field lives in ModelConfig or in the family's struct");
      (void)c;
      return g;
    }
  }
  template <class T>
  static std::string name_of(const std::vector<std::pair<T, const char*>>& names, T value) {
    for (const auto& n : names)
      if (n.first == value) return n.second;
    // A configuration built in code may hold a string no name lists: written as it is.
    if constexpr (std::is_same_v<T, std::string>) return value;
    return "?";
  }
  // "a, b or c".
  static std::string one_of(const std::vector<std::string>& names) {
    std::string s;
    for (std::size_t i = 0; i < names.size(); ++i)
      s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return s;
  }
  // "a, b and c".
  static std::string all_of(const std::vector<std::string>& names) {
    std::string s;
    for (std::size_t i = 0; i < names.size(); ++i)
      s += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
    return s;
  }
  static Entry entry(const char* key, FieldSpec::Type type, std::string fallback) {
    Entry e;
    e.spec.key = key;
    e.spec.type = type;
    e.spec.fallback = std::move(fallback);
    return e;
  }
  Schema& add(Entry e) {
    entries_.push_back(std::move(e));
    return *this;
  }
  Entry& last() { return entries_.back(); }

  std::vector<Entry> entries_;
};

template <class S>
void read_objects(const json::Value& v, const std::string& source, const std::string& owner,
                  const Schema<S>& inner, const char* why, ModelConfig& c, ObjectBlock<S>& out) {
  out = ObjectBlock<S>{};
  out.present = true;
  out.is_list = v.is_array();
  const auto read_one = [&](const json::Value& o, const std::string& name) {
    if (!o.is_object()) config_fail(source, "{} is {}, expected an object", name, o.kind_name());
    Fields sub(o, source, name);
    S item;
    inner.read(sub, c, item);
    sub.reject_unknown(why);
    out.specs.push_back(std::move(item));
  };
  if (v.is_object()) {
    read_one(v, owner);
  } else if (v.is_array()) {
    for (const auto& o : v.array()) read_one(o, fmt::format("{}[{}]", owner, out.specs.size()));
  } else {
    config_fail(source, "{} is {}, expected an object or a list of objects", owner, v.kind_name());
  }
}

template <class S>
std::string objects_text(const Schema<S>& inner, const ModelConfig& c, const ObjectBlock<S>& block) {
  std::string text;
  for (const S& item : block.specs) {
    FieldWriter w;
    inner.write(w, c, item);
    text += (text.empty() ? "" : ", ") + w.object();
  }
  return block.is_list ? "[" + text + "]" : text;
}

}  // namespace recur::model
