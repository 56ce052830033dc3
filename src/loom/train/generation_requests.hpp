// Generation requests as text: one per line, either a JSON object
//   {"prompt": "ROMEO:", "tokens": 50, "stop": "\n\n", "seed": 3}
// (only "prompt" required, each key at most once; the others default to the command's
// options; spaces around it allowed) or a line of plain text, taken as the prompt as it is.
// Blank lines (empty, or only spaces and tabs) are no request and are skipped. Request i of
// a file (0-based, blank lines not counted) samples with seed + i unless it names its own
// seed, so a file's results do not depend on the batch size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/train/generation.hpp"

namespace loom::train {

// True for a line that is no request: empty, or only spaces, tabs and carriage returns.
bool is_blank_request_line(const std::string& line);
// defaults.seed is the seed of request 0; index counts requests. loom::Error naming `where`
// for invalid JSON, an unknown or repeated key, a value of the wrong type or out of range, or
// a missing prompt.
GenerationRequest parse_request_line(const std::string& line, const GenerationRequest& defaults, int64_t index,
                                     const std::string& where);
// Every request of a file; loom::Error naming the file (and line) when it cannot be read,
// holds a bad line, or holds no request at all. With a tokenizer, also a prompt it cannot
// encode (invalid UTF-8, a character outside its vocabulary) or, given the model's
// block_size (> 0), one of more tokens than that, before anything is generated.
std::vector<GenerationRequest> read_prompts_file(const std::string& path, const GenerationRequest& defaults,
                                                 const data::Tokenizer* tokenizer = nullptr, int64_t block_size = 0);

}  // namespace loom::train
