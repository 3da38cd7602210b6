// recur serve's chat page: plain HTML, CSS and JavaScript shipped in the binary and served at
// "/", with no build step and nothing fetched from elsewhere (docs/chat.md).
#pragma once

namespace recur::serve {

/// The whole page, UTF-8.
extern const char* const kChatPage;

}  // namespace recur::serve
