"""Reference encodings for tests/model/test_tokenizer_golden.cpp, computed with tiktoken.

Usage: tiktoken_golden.py VOCAB_DIR CASES_JSON OUT_JSON

CASES_JSON: {"pattern": <pattern string>, "cases": [{"text": str, "special": bool}, ...]}. The vocabulary
is VOCAB_DIR/tiktoken.model; special tokens are the 256 ids after the mergeable ranks, named by
VOCAB_DIR/tokenizer_config.json (added_tokens_decoder) or <|reserved_token_{id}|>. Each case is encoded
the way tokenization_kimi.py encodes a text piece: 400,000-character chunks, then slices with at most
25,000 consecutive whitespace / non-whitespace characters, each slice encoded by tiktoken with
allowed_special="all" (special) or disallowed_special=() (plain text).
"""
import json
import sys

import tiktoken
from tiktoken.load import load_tiktoken_bpe


def split_runs(s, limit):
    run = 0
    run_is_space = s[0].isspace() if s else False
    start = 0
    for i, ch in enumerate(s):
        now = ch.isspace()
        if run_is_space ^ now:
            run = 1
            run_is_space = now
        else:
            run += 1
            if run > limit:
                yield s[start:i]
                start = i
                run = 1
    yield s[start:]


def main():
    vocab_dir, cases_path, out_path = sys.argv[1:4]
    with open(cases_path, encoding="utf-8") as f:
        spec = json.load(f)
    ranks = load_tiktoken_bpe(vocab_dir + "/tiktoken.model")
    n = len(ranks)
    names = {}
    try:
        with open(vocab_dir + "/tokenizer_config.json", encoding="utf-8") as f:
            for k, v in json.load(f).get("added_tokens_decoder", {}).items():
                names[int(k)] = v["content"]
    except FileNotFoundError:
        pass
    specials = {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(n, n + 256)}
    enc = tiktoken.Encoding(name="golden", pat_str=spec["pattern"], mergeable_ranks=ranks, special_tokens=specials)
    out = []
    for case in spec["cases"]:
        text = case["text"]
        ids = []
        for i in range(0, len(text), 400_000):
            for piece in split_runs(text[i:i + 400_000], 25_000):
                if case["special"]:
                    ids.extend(enc.encode(piece, allowed_special="all"))
                else:
                    ids.extend(enc.encode(piece, disallowed_special=()))
        out.append(ids)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
