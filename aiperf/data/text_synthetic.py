"""`synthetic-text`: a learnable language generated from the seed, as a stream of byte tokens.

The language models of the LM track must show that deeper and wider models do measurably better,
on any machine, without a corpus to download. So the language has structure at several ranges,
each of which only a model that sees far enough back can use:

- within a word (a few tokens): a seeded lexicon of "words", built from syllables with seeded
  letter preferences; adverbs end in "ly";
- between words (tens of tokens): sentences follow templates drawn from a seeded probabilistic
  grammar (determiners, adjectives, nouns, verbs, prepositional phrases, clauses joined by a
  conjunction), adjectives and nouns have favoured collocates, and a verb agrees with its subject
  across the words between them (a plural noun takes the bare verb, a singular one its "s" form);
- across a sentence: parentheses around a prepositional phrase and quotes around a whole sentence
  are always closed;
- across a document (hundreds of tokens): each document has a topic that biases its content words,
  and a key of four capital letters given in its header (`@KEY`) and repeated after every
  paragraph of one to three sentences (`#KEY`, about 100 tokens apart: two thirds of them within
  128 tokens of the last): copying it pays only to a model that attends back to the last one. A
  document ends with byte 0xFF (DOC_END), as each file of `text` data does.

Bytes 0..255 are the vocabulary (VOCAB_SIZE); the stream is uint16, as every token shard is.
Everything is drawn from numpy generators seeded by (seed, split), vectorised over the sentences of
a chunk of documents, so two million tokens take about a second; the validation split comes from
its own generator, so it is the same whatever the number of training tokens. GENERATOR names this
language: any change to it must change the name, and with it the staged folder and the digest.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

GENERATOR = "aiperf-text-1"  # the language's version: in staged names and the manifest's source
VOCAB_SIZE = 256  # byte tokens
TOPICS = 16
CHUNK_DOCS = 256  # documents generated at once: fixed, so the stream never depends on its length
# Words per class in the lexicon; content classes (adj, noun, verb, adv) are biased by the topic.
CLASSES = ("det", "adj", "noun", "verb", "adv", "prep", "conj")
LEXICON = {"det": 8, "adj": 64, "noun": 256, "verb": 128, "adv": 32, "prep": 16, "conj": 6}
LENGTHS = {
    "det": (1, 3),
    "adj": (3, 7),
    "noun": (3, 8),
    "verb": (3, 7),
    "adv": (3, 6),
    "prep": (2, 4),
    "conj": (2, 4),
}
CONTENT = ("adj", "noun", "verb", "adv")
NEXT_CLASS = {"adj": "noun", "noun": "verb"}  # a word's collocates are words of this class
COLLOCATES = 3  # favoured next words per adjective or noun
COLLOCATE_P = 0.5  # chance a favoured next word is taken
TOPIC_SHARE, TOPIC_BOOST = 8, 12.0  # a topic favours 1/8 of each content class, 12 times
PLURAL_P, QUOTE_P = 0.35, 0.1
TEMPLATES = 48
DOC_END = 0xFF  # ends every document; never a byte of UTF-8 text (aiperf/data/text_folder.py)
LITERALS = (b" ", b".", b",", b"(", b")", b'"', b"\n", b"@", b" #", bytes([DOC_END]))
SPACE, PERIOD, COMMA, OPEN, CLOSE, QUOTE, NEWLINE, AT, HASH, END = range(len(LITERALS))
VOWELS, CONSONANTS = "aeiouy", "bcdfghjklmnpqrstvwxz"


@dataclass(frozen=True)
class Language:
    """The seeded language: pieces of text (words, their "s" forms, literals) and how words are
    chosen. Piece p is bytes flat[offsets[p] : offsets[p] + lengths[p]]."""

    flat: np.ndarray  # uint8: every piece's bytes
    offsets: np.ndarray
    lengths: np.ndarray
    words: int  # W: pieces 0..W-1 are words, W..2W-1 their "s" forms, then LITERALS
    word_class: np.ndarray  # class index of each word
    pair_cdf: np.ndarray  # (topic * classes + class) + cumulative probability, ascending
    pair_words: np.ndarray  # the word of each pair_cdf entry
    collocates: np.ndarray  # (W, COLLOCATES) favoured next words, -1 where none
    # Templates: per template, its columns (literal piece or word slot) and its slots.
    col_piece: np.ndarray  # (T, C) literal piece, -1 for a word slot or padding
    col_slot: np.ndarray  # (T, C) word slot, -1 for a literal or padding
    slot_class: np.ndarray  # (T, S) class of each slot, -1 for none
    slot_prev: np.ndarray  # (T, S) the slot before it in the sentence, -1 for the first
    slot_link: np.ndarray  # (T, S) a verb's subject slot, -1 for others
    template_p: np.ndarray

    def literal(self, index: int) -> int:
        return 2 * self.words + index


def _word(rng: np.random.Generator, low: int, high: int, weights: np.ndarray) -> str:
    """A word of low..high letters from syllables (consonant, vowel, sometimes a consonant)."""
    length = int(rng.integers(low, high + 1))
    letters: list[str] = []
    while len(letters) < length:
        letters.append(CONSONANTS[rng.choice(len(CONSONANTS), p=weights)])
        letters.append(VOWELS[rng.integers(len(VOWELS))])
        if rng.random() < 0.3:
            letters.append(CONSONANTS[rng.choice(len(CONSONANTS), p=weights)])
    return "".join(letters[:length])


def _lexicon(rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """Unique words of every class, and each word's class index."""
    seen: set[str] = set()
    words: list[str] = []
    classes: list[int] = []
    for index, name in enumerate(CLASSES):
        weights = rng.dirichlet(np.full(len(CONSONANTS), 0.7))  # this class's sound
        low, high = LENGTHS[name]
        made = 0
        while made < LEXICON[name]:
            word = _word(rng, low, high, weights) + ("ly" if name == "adv" else "")
            if word in seen or word + "s" in seen or word.endswith("s"):
                continue
            seen.add(word)
            words.append(word)
            classes.append(index)
            made += 1
    return words, np.array(classes)


def _choice_tables(
    rng: np.random.Generator, word_class: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per (topic, class): a Zipf distribution over the class's words, a topic's favoured share
    of the content classes boosted. Flattened into one ascending table (pair + cumulative p), so
    every slot of a chunk is drawn with one searchsorted."""
    cdfs, words = [], []
    base = {}
    for index, _name in enumerate(CLASSES):
        members = np.nonzero(word_class == index)[0]
        base[index] = (rng.permutation(members), 1.0 / np.arange(1, len(members) + 1))
    for topic in range(TOPICS):
        for index, name in enumerate(CLASSES):
            members, weights = base[index]
            weights = weights.copy()
            if name in CONTENT:
                favoured = rng.choice(len(members), len(members) // TOPIC_SHARE, replace=False)
                weights[favoured] *= TOPIC_BOOST
            cdf = np.cumsum(weights) / weights.sum()
            cdf[-1] = 1.0
            cdfs.append(topic * len(CLASSES) + index + cdf)
            words.append(members)
    return np.concatenate(cdfs), np.concatenate(words)


def _templates(rng: np.random.Generator) -> list[list[tuple[str, int, int]]]:
    """Sentence templates from a probabilistic grammar: items are ("w", class, link) for a word
    (link: a verb's subject, as an index into the template's words) or ("l", literal, -1)."""
    cls = {name: i for i, name in enumerate(CLASSES)}

    def phrase(out: list, allow_pp: bool) -> int:
        """A noun phrase; returns its noun's word index."""
        out.append(("w", cls["det"], -1))
        for _ in range(int(rng.choice(3, p=[0.5, 0.35, 0.15]))):
            out.append(("w", cls["adj"], -1))
        noun = sum(1 for item in out if item[0] == "w")  # the noun's index among the words
        out.append(("w", cls["noun"], -1))
        if allow_pp and rng.random() < 0.3:
            bracket = rng.random() < 0.4
            if bracket:
                out.append(("l", OPEN, -1))
            out.append(("w", cls["prep"], -1))
            phrase(out, False)
            if bracket:
                out.append(("l", CLOSE, -1))
        return noun

    def clause(out: list) -> None:
        subject = phrase(out, True)
        out.append(("w", cls["verb"], subject))
        if rng.random() < 0.6:
            phrase(out, True)
        if rng.random() < 0.3:
            out.append(("w", cls["adv"], -1))

    made: list[list[tuple[str, int, int]]] = []
    while len(made) < TEMPLATES:
        items: list[tuple[str, int, int]] = []
        clause(items)
        if rng.random() < 0.25:
            items.append(("l", COMMA, -1))
            items.append(("w", cls["conj"], -1))
            clause(items)
        if items not in made:
            made.append(items)
    return made


def _columns(template: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
    """A template's columns as (literal, slot), spaces between words placed as text has them."""
    columns: list[tuple[int, int]] = []
    slot = 0
    for kind, value, _link in template:
        if kind == "w":
            if columns and columns[-1][0] != OPEN:
                columns.append((SPACE, -1))
            columns.append((-1, slot))
            slot += 1
        elif value == OPEN:
            columns.append((SPACE, -1))
            columns.append((OPEN, -1))
        else:
            columns.append((value, -1))
    columns.append((PERIOD, -1))
    return columns


@lru_cache(maxsize=4)
def language(seed: int) -> Language:
    """The language of this seed (cached: both splits and every chunk share it)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    words, word_class = _lexicon(rng)
    count = len(words)
    pieces = [w.encode() for w in words] + [(w + "s").encode() for w in words]
    pieces += list(LITERALS)
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    flat = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    pair_cdf, pair_words = _choice_tables(rng, word_class)
    collocates = np.full((count, COLLOCATES), -1, dtype=np.int64)
    for name, following in NEXT_CLASS.items():
        targets = np.nonzero(word_class == CLASSES.index(following))[0]
        for word in np.nonzero(word_class == CLASSES.index(name))[0]:
            collocates[word] = rng.choice(targets, COLLOCATES, replace=False)
    templates = _templates(rng)
    columns = [_columns(t) for t in templates]
    width = max(len(c) for c in columns)
    slots = max(sum(1 for item in t if item[0] == "w") for t in templates)
    col_piece = np.full((len(templates), width), -1, dtype=np.int64)
    col_slot = np.full((len(templates), width), -1, dtype=np.int64)
    slot_class = np.full((len(templates), slots), -1, dtype=np.int64)
    slot_prev = np.full((len(templates), slots), -1, dtype=np.int64)
    slot_link = np.full((len(templates), slots), -1, dtype=np.int64)
    for t, (template, cols) in enumerate(zip(templates, columns, strict=True)):
        for c, (literal, slot) in enumerate(cols):
            col_piece[t, c] = 2 * count + literal if literal >= 0 else -1
            col_slot[t, c] = slot
        word_items = [item for item in template if item[0] == "w"]
        for s, (_kind, klass, link) in enumerate(word_items):
            slot_class[t, s], slot_prev[t, s], slot_link[t, s] = klass, s - 1, link
    template_p = 1.0 / np.arange(1, len(templates) + 1) ** 0.8
    return Language(
        flat=flat,
        offsets=offsets,
        lengths=lengths,
        words=count,
        word_class=word_class,
        pair_cdf=pair_cdf,
        pair_words=pair_words,
        collocates=collocates,
        col_piece=col_piece,
        col_slot=col_slot,
        slot_class=slot_class,
        slot_prev=slot_prev,
        slot_link=slot_link,
        template_p=template_p / template_p.sum(),
    )


@dataclass(frozen=True)
class Draw:
    """Every choice the generator made for one chunk of documents, before they become bytes:
    what aiperf/data/text_entropy.py sums the probabilities of (the data's entropy floor)."""

    topic: np.ndarray  # (docs,) each document's topic
    keys: np.ndarray  # (docs, 4) uint8: each document's key
    paragraphs: np.ndarray  # (docs,) paragraphs per document
    sentences: np.ndarray  # (paragraphs,) sentences per paragraph
    sent_doc: np.ndarray  # (n,) each sentence's document
    template: np.ndarray  # (n,) each sentence's template
    quoted: np.ndarray  # (n,) whether the sentence is in quotes
    chosen: np.ndarray  # (n, S) each word slot's word, -1 where the template has no slot
    plural: np.ndarray  # (n, S) whether a noun slot takes its "s" form (other slots: ignored)


def _draw(lang: Language, rng: np.random.Generator) -> Draw:
    """CHUNK_DOCS documents' choices, every sentence drawn at once (the draws' order is the
    language's: changing it changes every byte)."""
    docs = CHUNK_DOCS
    topic = rng.integers(TOPICS, size=docs)
    keys = rng.integers(ord("A"), ord("Z") + 1, size=(docs, 4)).astype(np.uint8)
    paragraphs = rng.integers(2, 7, size=docs)  # 2..6 paragraphs of 1..3 sentences
    par_doc = np.repeat(np.arange(docs), paragraphs)
    sentences = rng.integers(1, 4, size=len(par_doc))
    sent_doc = np.repeat(par_doc, sentences)
    n = len(sent_doc)
    template = rng.choice(len(lang.template_p), size=n, p=lang.template_p)
    quoted = rng.random(n) < QUOTE_P

    # Words, slot by slot (every sentence at once): topic-biased, or a favoured collocate.
    slot_class = lang.slot_class[template]
    chosen = np.full(slot_class.shape, -1, dtype=np.int64)
    sent_topic = topic[sent_doc]
    for j in range(slot_class.shape[1]):
        rows = np.nonzero(slot_class[:, j] >= 0)[0]
        klass = slot_class[rows, j]
        pair = sent_topic[rows] * len(CLASSES) + klass
        pick = np.searchsorted(lang.pair_cdf, pair + rng.random(len(rows)), side="right")
        words = lang.pair_words[np.minimum(pick, len(lang.pair_words) - 1)]
        prev = lang.slot_prev[template[rows], j]
        before = np.where(prev >= 0, chosen[rows, np.maximum(prev, 0)], -1)
        favoured = lang.collocates[np.maximum(before, 0), rng.integers(COLLOCATES, size=len(rows))]
        take = (before >= 0) & (favoured >= 0) & (rng.random(len(rows)) < COLLOCATE_P)
        take &= lang.word_class[np.maximum(favoured, 0)] == klass
        chosen[rows, j] = np.where(take, favoured, words)
    noun = CLASSES.index("noun")
    plural = (slot_class == noun) & (rng.random(slot_class.shape) < PLURAL_P)
    return Draw(topic, keys, paragraphs, sentences, sent_doc, template, quoted, chosen, plural)


def _render(lang: Language, draw: Draw) -> np.ndarray:
    """A chunk's choices as uint16 tokens (no draws here: the bytes follow from the choices)."""
    docs, sent_doc, template = len(draw.topic), draw.sent_doc, draw.template
    n = len(sent_doc)
    ends = np.cumsum(draw.sentences) - 1  # each paragraph's last sentence
    last = np.zeros(n, dtype=bool)
    last[ends] = True
    first_of_doc = np.ones(n, dtype=bool)
    first_of_doc[1:] = sent_doc[1:] != sent_doc[:-1]
    last_of_doc = np.roll(first_of_doc, -1)
    # Forms: plural nouns take "s"; a verb takes "s" when its subject is singular.
    slot_class = lang.slot_class[template]
    link = lang.slot_link[template]
    subject_plural = np.take_along_axis(draw.plural, np.maximum(link, 0), axis=1)
    form = np.where(slot_class == CLASSES.index("verb"), ~subject_plural, draw.plural)
    piece_of_slot = draw.chosen + lang.words * form

    # The sentence's columns: header, open quote, the template, close quote, trailer.
    key_piece = 2 * lang.words + len(LITERALS) + sent_doc
    none = np.full(n, -1, dtype=np.int64)
    cols = lang.col_piece[template]
    slots = lang.col_slot[template]
    body = np.where(
        slots >= 0, np.take_along_axis(piece_of_slot, np.maximum(slots, 0), axis=1), cols
    )
    quote = np.where(draw.quoted, lang.literal(QUOTE), none)
    table = np.column_stack(
        [
            np.where(first_of_doc, lang.literal(AT), none),
            np.where(first_of_doc, key_piece, none),
            np.where(first_of_doc, lang.literal(NEWLINE), none),
            quote,
            body,
            quote,
            np.where(last, lang.literal(HASH), lang.literal(SPACE)),
            np.where(last, key_piece, none),
            np.where(last, lang.literal(NEWLINE), none),
            np.where(last_of_doc, lang.literal(END), none),
        ]
    )
    pieces = table[table >= 0]  # row by row: the document's text in order

    # Pieces to bytes: the static table plus this chunk's keys, gathered in one go.
    flat = np.concatenate([lang.flat, draw.keys.ravel()])
    offsets = np.concatenate([lang.offsets, len(lang.flat) + 4 * np.arange(docs)])
    lengths = np.concatenate([lang.lengths, np.full(docs, 4)])
    size = lengths[pieces]
    starts = np.repeat(offsets[pieces] - (np.cumsum(size) - size), size)
    return flat[starts + np.arange(int(size.sum()))].astype(np.uint16)


def chunks(seed: int, split: str) -> Iterator[tuple[Language, Draw]]:
    """The split's chunks of choices, in order, without end (stream renders them)."""
    lang = language(seed)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1 if split == "train" else 2]))
    while True:
        yield lang, _draw(lang, rng)


def stream(seed: int, split: str, tokens: int) -> np.ndarray:
    """`tokens` tokens of the language of `seed` for `split` (train or validation). A longer
    stream of the same split starts with the shorter one."""
    parts, have = [], 0
    drawn = chunks(seed, split)
    while have < tokens:
        lang, draw = next(drawn)
        part = _render(lang, draw)
        parts.append(part)
        have += len(part)
    return np.concatenate(parts)[:tokens] if parts else np.zeros(0, dtype=np.uint16)


def sample(seed: int, tokens: int = 400) -> str:
    """The first tokens of the training stream as text, for people (docs, a look at the data):
    the end of a document shows as a blank line."""
    text = stream(seed, "train", tokens).astype(np.uint8).tobytes()
    return text.replace(bytes([DOC_END]), b"\n").decode("ascii")
