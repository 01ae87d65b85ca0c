// Errors raised by the Kimi tokenizer: malformed vocabulary files, invalid UTF-8 input, unknown ids,
// chats that cannot be rendered. All derive from kiln::InvalidArgument (the input was at fault).
#pragma once

#include "runtime/error.hpp"

namespace kiln::model {

class TokenizerError : public kiln::InvalidArgument {
public:
    using InvalidArgument::InvalidArgument;
};

}  // namespace kiln::model
