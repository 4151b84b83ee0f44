#!/usr/bin/env python3
"""Writes tests/data/gpt2_bpe/: a small GPT-2-format byte-level BPE (vocab.json, merges.txt) and
the ids GPT-2's own encoder gives for a set of texts (expected.json).

The encoder below is openai/gpt-2's src/encoder.py (bytes_to_unicode, get_pairs, Encoder.bpe and
its pre-tokenising pattern), run with the `regex` module (Debian: python3-regex) as GPT-2 does.
The merges are learned here from a short text (the most frequent adjacent pair first, ties to
the pair that sorts first), so the vocabulary is small but every rule of the format is used:
256 byte symbols, merges, and a special token. Run once; the outputs are committed:

    python3 tests/data/gen_gpt2_bpe_ref.py
"""
import collections
import json
import os

import regex as re

PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTE_ENCODER = bytes_to_unicode()


def get_pairs(word):
    return {(word[i], word[i + 1]) for i in range(len(word) - 1)}


def bpe(token, ranks):
    word = tuple(token)
    pairs = get_pairs(word)
    if not pairs:
        return [token]
    while True:
        bigram = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new_word = []
        i = 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new_word.extend(word[i:])
                break
            new_word.extend(word[i:j])
            i = j
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
        pairs = get_pairs(word)
    return list(word)


def encode(text, encoder, ranks):
    ids = []
    for token in re.findall(PAT, text):
        token = "".join(BYTE_ENCODER[b] for b in token.encode("utf-8"))
        ids.extend(encoder[t] for t in bpe(token, ranks))
    return ids


def learn_merges(text, count):
    words = collections.Counter(
        tuple("".join(BYTE_ENCODER[b] for b in w.encode("utf-8"))) for w in re.findall(PAT, text))
    merges = []
    for _ in range(count):
        pairs = collections.Counter()
        for w, f in words.items():
            for i in range(len(w) - 1):
                pairs[(w[i], w[i + 1])] += f
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], tuple(-ord(c) for c in kv[0][0] + kv[0][1])))[0]
        merges.append(best)
        merged = {}
        for w, f in words.items():
            out, i = [], 0
            while i < len(w):
                if i < len(w) - 1 and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + f
        words = merged
    return merges


TRAIN = ("The quick brown fox jumps over the lazy dog. It's the fox's den, isn't it? "
         "We'll see: they're here, you've won, I'm done, he'd go. 1234 5678 90 2026-12-03. "
         "Über naïve café — 東京 and Москва, ñandú!  Tabs\tand\nnew lines\n\n  spaced   out  ")

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "It's the fox's den; isn't it? they're, we've, I'm, you'll, he'd",
    "IT'S SHOUTED 'quoted' and 'S",
    "12345 67 8.9 2026-12-03 ٣٤ ⅫⅦ",
    "Über naïve café — 東京 and Москва, ñandú!",
    "  leading spaces, trailing spaces  ",
    "a\tb\n\nc   d\u00a0e\u3000f\r\n",
    "emoji 🙂🙂 and symbols <|endoftext|> $%&*",
    "",
    " ",
    "\n",
    "x",
]


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2_bpe")
    os.makedirs(here, exist_ok=True)
    merges = learn_merges(TRAIN, 120)
    symbols = [BYTE_ENCODER[b] for b in range(256)]
    symbols += [a + b for a, b in merges]
    symbols.append("<|endoftext|>")
    encoder = {s: i for i, s in enumerate(symbols)}
    ranks = {m: i for i, m in enumerate(merges)}
    with open(os.path.join(here, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(encoder, f, ensure_ascii=False)
    with open(os.path.join(here, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    cases = [{"text": t, "ids": encode(t, encoder, ranks)} for t in TEXTS]
    for c in cases:
        assert bytes(
            b for i in c["ids"] for b in
            [{v: k for k, v in BYTE_ENCODER.items()}[ch] for ch in symbols[i]]).decode() == c["text"]
    with open(os.path.join(here, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"source": "tests/data/gen_gpt2_bpe_ref.py (openai/gpt-2 src/encoder.py)",
                   "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"{len(symbols)} symbols, {len(merges)} merges, {len(cases)} texts")


if __name__ == "__main__":
    main()
