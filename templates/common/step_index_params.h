// The index arrays of one forward step (model/forward/step_index.hpp builds them), as every mixer kernel
// reads them: sequences are varlen, their new tokens packed in batch order.
//   cu_seqlens [num_seqs + 1]     new-token offsets: sequence s owns tokens [cu_seqlens[s], cu_seqlens[s+1])
//   seq_start  [num_seqs]         tokens already in the KV pages and the KDA state before this step
//   seq_slot   [num_seqs]         KDA working slot (read and updated in place)
//   token_seq  [num_tokens]       the sequence of each new token
//   token_pos  [num_tokens]       its absolute position (seq_start + offset in the chunk)
//   page_table [num_seqs x max_pages]  physical KV page of every page_size positions, row s for sequence s
//   snap_seq / snap_pos / snap_slot [num_snaps]  write sequence snap_seq's KDA state after snap_pos tokens
//                                 (a multiple of the chunk, inside this step) into slot snap_slot
// Slot i of the arena starts at arena_base + i x slot_bytes; page j at arena_base + arena_bytes - (j+1) x page_bytes
// (model/forward/memory_layout.hpp says what a slot and a page hold).
#pragma once

#include "common/kiln_params.h"

namespace kiln_params {

struct StepIndex {
    const i32* cu_seqlens;
    const i32* seq_start;
    const i32* seq_slot;
    const i32* token_seq;
    const i32* token_pos;
    const i32* page_table;
    const i32* snap_seq;
    const i32* snap_pos;
    const i32* snap_slot;
    u64 arena_base;
    u64 arena_bytes;
    u64 slot_bytes;
    u64 page_bytes;
    i32 num_seqs;
    i32 num_tokens;
    i32 max_pages;      // columns of page_table
    i32 page_size;      // tokens per KV page
    i32 num_snaps;
    i32 max_new_tokens; // the longest sequence's new tokens in this step
};
KILN_PARAMS_SIZE(StepIndex, 128);
KILN_PARAMS_OFFSET(StepIndex, arena_base, 72);
KILN_PARAMS_OFFSET(StepIndex, num_seqs, 104);
KILN_PARAMS_OFFSET(StepIndex, max_new_tokens, 124);

}  // namespace kiln_params
