// Structured output: a JSON schema compiled to a pushdown automaton over bytes, and a matcher
// that says which bytes may come next. The token mask that sampling uses is built on it
// (recur/json_constraint.h).
//
// What it covers: type (object, array, string, number, integer, boolean, null, and a list of
// them such as ["string", "null"]), enum, const, properties, required, additionalProperties
// (true, false or a schema), items, prefixItems, minItems, maxItems, anyOf, oneOf (enforced as
// anyOf: an output may match more than one branch), $ref to "#", "#/$defs/..." or
// "#/definitions/..." (recursion included), $defs, and annotations (title, description,
// default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly). Any other keyword
// is an ArgumentError that names it and its JSON path: recur never lets through output that the
// schema would refuse.
//
// The text it accepts is compact JSON: no whitespace anywhere (so that a model can never loop on
// spaces), object keys written without escapes, numbers of at most 15 integer and 15 fraction
// digits and a 2-digit exponent (an integer is then exact in a double), enum and const values in
// their compact form. Every text it accepts parses and validates against the schema.
//
// The same automaton also runs a sequence (JsonGrammar::sequence): literal bytes, JSON values of
// schemas and tagged free text, one after another, with choices between sequences. That is how
// a reply is held to a tool call in a template's format (recur/chat_reply.h, tool_call_grammar).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace recur {

/// One piece of a sequence grammar (JsonGrammar::sequence).
struct GrammarPiece {
  enum class Kind {
    kBytes,   ///< `text`, byte for byte
    kSchema,  ///< a compact JSON value of the schema `text` at the JSON pointer `pointer`
    kText,    ///< any UTF-8 text (tab, newline, carriage return and printable bytes) without
              ///< the closing tag `text`, then that tag; with `newline_before`, the tag follows a
              ///< newline of the text. The tag is ASCII, starts with '<', holds no newline and
              ///< no second '<' (as </think> and </parameter>).
    kChoice,  ///< one of `options`, each a sequence
  };
  Kind kind = Kind::kBytes;
  std::string text;
  std::string pointer = "#";
  bool newline_before = false;
  std::vector<std::vector<GrammarPiece>> options;

  static GrammarPiece bytes(std::string b) { return {Kind::kBytes, std::move(b), "#", false, {}}; }
  static GrammarPiece schema(std::string s, std::string at = "#") { return {Kind::kSchema, std::move(s), std::move(at), false, {}}; }
  static GrammarPiece tagged_text(std::string tag, bool newline) { return {Kind::kText, std::move(tag), "#", newline, {}}; }
  static GrammarPiece choice(std::vector<std::vector<GrammarPiece>> o) { return {Kind::kChoice, "", "#", false, std::move(o)}; }
};

/// A compiled schema: immutable, shared by every sequence that uses it.
class JsonGrammar {
 public:
  /// Compiles a JSON schema (the text of a JSON object, or true). Throws ArgumentError
  /// "[JsonGrammar::compile] <path>: <keyword> ..." for what it does not cover or cannot satisfy.
  static std::shared_ptr<const JsonGrammar> compile(std::string_view schema);
  /// Any JSON object (response_format {"type": "json_object"}).
  static std::shared_ptr<const JsonGrammar> any_object();
  /// The pieces one after another. Throws ArgumentError as compile() does for a schema piece
  /// ("[JsonGrammar::compile] <pointer>...: ..."), and for an empty sequence or a bad tag.
  static std::shared_ptr<const JsonGrammar> sequence(const std::vector<GrammarPiece>& pieces);

  ~JsonGrammar();
  JsonGrammar(const JsonGrammar&) = delete;
  JsonGrammar& operator=(const JsonGrammar&) = delete;

  /// The fewest bytes of a whole value.
  std::size_t min_bytes() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  JsonGrammar();
  std::unique_ptr<Impl> impl_;
};

/// Where a text is in the automaton: copyable (a copy is a fork), cheap to copy when small.
class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const JsonGrammar> grammar);
  /// Takes one byte; returns false and leaves the state as it was when the byte cannot come next.
  bool advance(unsigned char byte);
  /// Takes every byte, or none (false).
  bool advance(std::string_view bytes);
  /// Whether the bytes so far are a whole value.
  bool complete() const;
  /// Whether no byte may follow (a whole value that cannot go on, as a closed object).
  bool finished() const;
  /// The fewest bytes that make the text a whole value (0 when complete()).
  std::size_t min_close() const;
  const JsonGrammar& grammar() const { return *grammar_; }

  /// One frame of a parse stack (opaque to users; public for the engine's trie walk).
  struct Frame {
    std::int32_t node = 0;
    std::uint8_t kind = 0, phase = 0;
    std::uint8_t utf8_need = 0, utf8_lo = 0, utf8_hi = 0;
    std::uint32_t a = 0, b = 0, c = 0;
    std::uint64_t seen = 0;
  };
  using Stack = std::vector<Frame>;
  /// Whether the state is inside a string's or a tagged text's plain text, where any printable
  /// ASCII byte other than '"', '\\' and '<' leaves it unchanged (the trie walk's shortcut).
  bool in_plain_string() const;
  /// Takes `other`'s position (both of one grammar), reusing this one's memory.
  void assign_state(const JsonMatcher& other) { stacks_ = other.stacks_; }

 private:
  std::shared_ptr<const JsonGrammar> grammar_;
  std::vector<Stack> stacks_;  // the parses still alive (anyOf branches that share a prefix)
  std::vector<Stack> next_;    // scratch for advance()
};

/// Whether `text` is a whole value of the grammar.
bool json_grammar_accepts(const std::shared_ptr<const JsonGrammar>& grammar, std::string_view text);

}  // namespace recur
