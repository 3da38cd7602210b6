// Stop sequences over streamed text: what a completion may release as its tokens come in. Text
// that may be the start of a stop sequence is held back until it cannot be one; the completion
// ends where a stop sequence begins, which is never released.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace recur::serve {

/// The hold-back of one request's stop sequences. Pieces of UTF-8 text go in (a token's text
/// each); what comes out is the same text, cut before the first stop sequence, released only
/// once no stop sequence can begin in it. With valid UTF-8 in and valid UTF-8 stop sequences,
/// every released piece is valid UTF-8: a stop sequence starts with a character's first byte,
/// so a cut or a held suffix never splits a character.
class StopSequences {
 public:
  /// Empty sequences are ignored (the API refuses them before they get here).
  explicit StopSequences(std::vector<std::string> stops = {});

  /// Adds `piece` and returns the text it releases: everything up to the first stop sequence
  /// when one is complete now (then stopped()), else all but the longest tail that begins some
  /// stop sequence. After a stop, nothing more is released.
  std::string put(std::string_view piece);
  /// The end of the text (the length limit or an end of sequence): releases what is held,
  /// which is no stop sequence, only the start of one. "" after a stop.
  std::string finish();
  /// Back to nothing held, with `stops` as the sequences.
  void reset(std::vector<std::string> stops);

  bool stopped() const { return stopped_; }
  /// The bytes held back now.
  std::size_t held() const { return held_.size(); }
  const std::vector<std::string>& stops() const { return stops_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // the released text's tail that may begin a stop sequence
  bool stopped_ = false;
};

}  // namespace recur::serve
