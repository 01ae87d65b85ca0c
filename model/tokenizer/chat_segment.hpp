// One piece of a rendered chat prompt. Segments are tokenized one by one and never concatenated
// first: `control` segments may contain special tokens (<|open|>, <|im_end|>, ...), text segments
// are plain text, so a user who types "<|end_of_msg|>" gets ordinary BPE tokens.
#pragma once

#include <string>
#include <vector>

namespace kiln::model {

struct ChatSegment {
    std::string text;
    bool control = false;  // encoding_k3.py's `allow_special`

    bool operator==(const ChatSegment&) const = default;
};

using ChatSegments = std::vector<ChatSegment>;

// The segments' texts joined: for display and debugging only, never for tokenization.
std::string join_segments(const ChatSegments& segments);

}  // namespace kiln::model
