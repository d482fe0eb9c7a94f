"""The entropy floor of `synthetic-text`: the fewest nats per token any model can expect to pay.

The generator (aiperf/data/text_synthetic.py) makes every byte from a few seeded choices per
document: its topic, its key, how many paragraphs and sentences, each sentence's template and
quotes, each word slot's word and each noun's number. Everything else (spaces, brackets, the key's
repeats, a verb's agreement, the bytes of a chosen word) follows from those choices. The choices can
be read back from the bytes (words are unique across classes, none ends in "s", so a noun's "s" form
is no other word), except two: the document's topic, and whether a word came from the topic's
table or as a favoured collocate of the word before. So the probability of a document's bytes is
the mixture over its 16 topics of the product, over its choices, of each choice's probability, a
word's probability being the sum over both ways of choosing it:

    P(doc) = 1/16 sum_t prod_choices p(choice | t),
    p(word w | t, the word before b) = (1 - c) P_t(w) + c [w in collocates(b)] / 3,

c = COLLOCATE_P where b's collocates are of the slot's class, else 0. By the chain rule this is the
product of the next-token probabilities of the ideal predictor (one that knows the generator and
sees the whole document), so H = -sum ln P(doc) / tokens is the floor of a model's mean
cross-entropy on the split, in nats per token: no model can expect less. It is measured on the
split's documents that lie whole within its first `tokens` tokens (the last one is cut short).
"""

from __future__ import annotations

import math

import numpy as np

from aiperf.data.text_synthetic import (
    CLASSES,
    COLLOCATE_P,
    COLLOCATES,
    DOC_END,
    LEXICON,
    PLURAL_P,
    QUOTE_P,
    TOPICS,
    Draw,
    Language,
    _render,
    chunks,
)

KEY_LETTERS = 26


def word_table(lang: Language) -> np.ndarray:
    """(TOPICS, W): each word's probability, given its class and the topic, from the topic's
    table (the generator's pair_cdf, one ascending block per (topic, class))."""
    table = np.zeros((TOPICS, lang.words))
    start = 0
    for topic in range(TOPICS):
        for index, name in enumerate(CLASSES):
            size = LEXICON[name]
            cdf = lang.pair_cdf[start : start + size] - (topic * len(CLASSES) + index)
            table[topic, lang.pair_words[start : start + size]] = np.diff(cdf, prepend=0.0)
            start += size
    return table


def template_nats(lang: Language) -> np.ndarray:
    """-ln p of each template's bytes: templates that read the same (the same literals and word
    classes in the same columns) share their probability."""
    shapes: dict[bytes, float] = {}
    keys = []
    for t in range(len(lang.template_p)):
        classes = np.where(
            lang.col_slot[t] >= 0, lang.slot_class[t, np.maximum(lang.col_slot[t], 0)], -1
        )
        key = np.stack([lang.col_piece[t], classes]).tobytes()
        shapes[key] = shapes.get(key, 0.0) + float(lang.template_p[t])
        keys.append(key)
    return -np.log(np.array([shapes[k] for k in keys]))


def word_nats(lang: Language, draw: Draw, table: np.ndarray) -> np.ndarray:
    """(docs, TOPICS): -ln p of each document's words given each topic (collocates mixed in)."""
    slot_class = lang.slot_class[draw.template]
    docs = len(draw.topic)
    nats = np.zeros((docs, TOPICS))
    for j in range(slot_class.shape[1]):
        rows = np.nonzero(slot_class[:, j] >= 0)[0]
        word = draw.chosen[rows, j]
        prev = lang.slot_prev[draw.template[rows], j]
        before = np.where(prev >= 0, draw.chosen[rows, np.maximum(prev, 0)], -1)
        favoured = lang.collocates[np.maximum(before, 0)]  # (rows, COLLOCATES)
        mixes = (before >= 0) & (favoured[:, 0] >= 0)
        mixes &= lang.word_class[np.maximum(favoured[:, 0], 0)] == slot_class[rows, j]
        share = np.where(mixes, COLLOCATE_P, 0.0)
        among = (favoured == word[:, None]).sum(axis=1) / COLLOCATES
        p = (1.0 - share)[:, None] * table[:, word].T + (share * among)[:, None]
        np.add.at(nats, draw.sent_doc[rows], -np.log(p))
    return nats


def choice_nats(lang: Language, draw: Draw) -> np.ndarray:
    """(docs,): -ln p of each document's choices that do not depend on its topic."""
    docs = len(draw.topic)
    per_doc = np.full(docs, 4 * math.log(KEY_LETTERS) + math.log(5))  # key; 2..6 paragraphs
    np.add.at(per_doc, np.repeat(np.arange(docs), draw.paragraphs), math.log(3))  # 1..3 sentences
    sentence = template_nats(lang)[draw.template]
    sentence -= np.where(draw.quoted, math.log(QUOTE_P), math.log(1.0 - QUOTE_P))
    nouns = lang.slot_class[draw.template] == CLASSES.index("noun")
    number = np.where(draw.plural, math.log(PLURAL_P), math.log(1.0 - PLURAL_P))
    sentence -= np.where(nouns, number, 0.0).sum(axis=1)
    np.add.at(per_doc, draw.sent_doc, sentence)
    return per_doc


def document_nats(lang: Language, draw: Draw, table: np.ndarray) -> np.ndarray:
    """(docs,): -ln P(doc) of each document of a chunk, its topic mixed out (module docstring)."""
    given_topic = word_nats(lang, draw, table)
    least = given_topic.min(axis=1)  # -ln of the mean of exp(-nats) over topics, stably
    mixed = least - np.log(np.exp(least[:, None] - given_topic).mean(axis=1))
    return choice_nats(lang, draw) + mixed


def entropy(seed: int, split: str, tokens: int) -> tuple[float, int]:
    """The floor H of `split`'s first `tokens` tokens in nats per token, and how many tokens it
    was measured on (the whole documents among them)."""
    nats, counted, have = 0.0, 0, 0
    table = None
    for lang, draw in chunks(seed, split):
        if table is None:
            table = word_table(lang)
        ends = np.nonzero(_render(lang, draw) == DOC_END)[0] + have
        lengths = np.diff(ends, prepend=have - 1)
        whole = ends < tokens
        nats += float(document_nats(lang, draw, table)[whole].sum())
        counted += int(lengths[whole].sum())
        have = int(ends[-1]) + 1
        if have >= tokens:
            return nats / counted, counted
    raise AssertionError("unreachable: chunks never ends")
