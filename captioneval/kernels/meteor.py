"""METEOR 1.5 per caption, with exactly pycocoevalcap's numbers: two implementations.

``"python"`` (default)
    :mod:`captioneval.kernels.meteor_py`, a pure-Python METEOR 1.5 that reads the jar's data and equals
    the jar bit for bit per caption (tests/test_meteor_python.py, goldens made by the jar); no Java.
``"java"``
    pycocoevalcap's jar through a pool of persistent JVMs (below).

:func:`meteor`, :func:`meteor_and_corpus` and :func:`statistics` use :data:`DEFAULT_IMPLEMENTATION`,
read at import from the environment variable ``CAPTIONEVAL_METEOR`` (``"python"`` or ``"java"``), or
the ``implementation`` argument.

The Java implementation:

METEOR 1.5 (Denkowski & Lavie 2014, "Meteor Universal: Language Specific Translation Evaluation for
Any Target Language", WMT) is the jar pycocoevalcap ships (https://github.com/tylin/coco-caption,
``pycocoevalcap/meteor/meteor.py``, class ``Meteor``). That wrapper starts
``java -jar -Xmx2G meteor-1.5.jar - - -stdio -l en -norm`` and speaks its line protocol:

1. per caption, ``SCORE ||| ref_1 ||| ... ||| ref_k ||| hypothesis`` -> one line of sufficient
   statistics (``Meteor._stat``), one write + flush + readline round trip per caption;
2. once, ``EVAL ||| stats_1 ||| ... ||| stats_m`` -> m lines with the score of each caption, then one
   line with the aggregate score (``Meteor.compute_score``).

This module sends the same lines to the same jar with the same command, working directory and
environment, so every per-caption score is the same float (``tests/test_meteor_pool.py`` checks
``==`` against :func:`captioneval.kernels.coco.meteor` on the 5,664 Flickr8k-Expert pairs). What
differs is only how the JVMs are driven:

* **pipelining**: a writer thread streams all SCORE lines of a part while the calling thread reads
  the statistics lines, so the JVM never waits for Python between captions;
* **a pool**: :class:`MeteorPool` holds ``size`` JVMs (each a subprocess with its own lock); a batch
  of m captions is split into ``size`` contiguous parts scored concurrently by threads, order kept.
  A caption's score depends only on its own statistics line, so splitting changes no number;
* **recovery**: a JVM that died (process exited, broken pipe, end of output) is restarted once and
  its part sent again; a second failure raises :class:`MeteorError` with the end of the JVM's stderr;
* **one pool per process**: :func:`meteor` uses a module-level pool created lazily with the size
  given to :func:`configure` (default 1), re-created in a forked child (a child never writes to its
  parent's pipes, see :func:`get_pool`).

Memory and CPU: each JVM runs with ``-Xmx2G`` as pycocoevalcap's does; loading the jar and its
English paraphrase table takes 4-8 s and leaves it about 1.3-1.4 GB resident. While scoring it keeps
one core busy, plus its JIT compiler threads during the first few thousand captions (the first pass
over Flickr8k-Expert costs a fresh JVM about twice the CPU of later passes). Hence the default of one
JVM per process: a Celery worker process (one pool per process, reused across chunks and runs) already
runs in parallel with the other worker processes, so ``concurrency`` JVMs per host. A single
long-lived process that scores whole datasets itself (the quick start's in-process jobs, a script)
gains from ``configure(2)`` once the JVMs are warm (about 1.7x on Flickr8k-Expert), but only with two
cores to spare and 3 GB of memory: on a 2-core machine two cold JVMs finish a single dataset later
than one, because their start-up and JIT work compete for the same cores.

The JVMs exit on their own when their stdin closes (the Python process ended, even by SIGKILL, or
the pool was dropped), so no JVM outlives its process.

Inputs are cleaned as :func:`captioneval.kernels.coco.meteor` does (``'|||'`` -> space, runs of
whitespace -> one space, stripped), since ``'|||'`` separates fields and a newline ends a request.
Django-free.
"""
from __future__ import annotations

import collections
import logging
import os
import shutil
import subprocess
import threading
import time
import weakref
from typing import Sequence

import numpy as np

from captioneval.text.tokenizer import JavaMissingError, require_java
from captioneval.utils.envchoice import env_choice

__all__ = ["IMPLEMENTATIONS", "DEFAULT_IMPLEMENTATION", "available", "statistics", "MeteorPool", "MeteorError", "JavaMissingError", "METEOR_ARGS", "configure", "prestart", "meteor",
           "get_pool", "pool_size", "meteor_and_corpus"]

log = logging.getLogger("captioneval.kernels.meteor")

IMPLEMENTATIONS = ("python", "java")
_ENV = "CAPTIONEVAL_METEOR"


def _default_implementation() -> str:
    return env_choice(_ENV, IMPLEMENTATIONS, "python", "METEOR implementation")


#: Implementation used when none is given (env ``CAPTIONEVAL_METEOR``; default ``"python"``).
DEFAULT_IMPLEMENTATION: str = _default_implementation()


def _implementation(implementation: str | None) -> str:
    impl = DEFAULT_IMPLEMENTATION if implementation is None else implementation
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"unknown METEOR implementation {impl!r}; allowed: {', '.join(IMPLEMENTATIONS)}")
    return impl


def available(implementation: str | None = None) -> bool:
    """Whether METEOR can run here: the Python implementation always can (given pycocoevalcap's
    data); the Java one needs ``java`` on PATH."""
    return _implementation(implementation) == "python" or shutil.which("java") is not None


#: pycocoevalcap's command (``Meteor.__init__``), run in the directory of its ``meteor.py``
METEOR_ARGS = ("-jar", "-Xmx2G", "meteor-1.5.jar", "-", "-", "-stdio", "-l", "en", "-norm")
#: lines of a JVM's stderr kept for error messages
_STDERR_LINES = 40
#: the request sent right after start: its answer says the jar has loaded (paraphrase table included)
_PING = b"SCORE ||| a dog ||| a dog\n"


class MeteorError(RuntimeError):
    """A METEOR JVM failed twice on the same part (or answered something that is not a number);
    the message gives the exit status and the end of its stderr."""


class _JvmDied(Exception):
    """Internal: the JVM's process ended or its pipes broke while scoring (restart and retry once)."""


def _meteor_dir() -> str:
    """Directory of pycocoevalcap's ``meteor.py`` and ``meteor-1.5.jar`` (its working directory)."""
    import importlib.util

    spec = importlib.util.find_spec("pycocoevalcap.meteor")
    if spec is None or not spec.submodule_search_locations:
        raise MeteorError("pycocoevalcap is not installed: METEOR 1.5 needs its meteor-1.5.jar")
    return os.path.abspath(list(spec.submodule_search_locations)[0])


def _write_all(stream, data: bytes) -> None:
    """Write ``data`` to a pipe with ``os.write`` (no Python-side buffer: nothing is ever left
    buffered that a forked child could flush into the parent's JVM when it drops its copy). Raises
    OSError (BrokenPipeError when the JVM is gone), ValueError (pipe closed)."""
    fd = stream.fileno()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _close_quietly(stream) -> None:
    try:
        stream.close()
    except (OSError, ValueError):
        pass


def _clean(text: str) -> str:
    """As :func:`captioneval.kernels.coco.meteor`: '|||' -> ' ', whitespace runs -> ' ', stripped."""
    return " ".join(text.replace("|||", " ").split())


class _Jvm:
    """One ``meteor-1.5.jar -stdio`` subprocess; every use holds :attr:`lock`."""

    def __init__(self, index: int):
        self.index = index
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.pid_owner = os.getpid()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        #: seconds from Popen to the first answer, for the last start (None before)
        self.start_seconds: float | None = None
        self.starts = 0
        self.start_error: BaseException | None = None

    # --- life cycle (caller holds self.lock) ------------------------------------------------------
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @staticmethod
    def _drain_stderr(stderr, tail: collections.deque) -> None:
        # pycocoevalcap never reads stderr; a JVM writing more than a pipe buffer there would block.
        # Holds neither the Popen nor this object, so a dropped pool's stdin closes and its JVM exits.
        for raw in iter(stderr.readline, b""):
            tail.append(raw.decode("utf-8", "replace").rstrip())

    def start(self) -> None:
        """Start the JVM and wait for its first answer (the jar loads its tables before reading).
        Raises JavaMissingError, MeteorError."""
        require_java()
        self.stop()
        began = time.perf_counter()
        self.stderr_tail.clear()
        proc = subprocess.Popen(
            ["java", *METEOR_ARGS], cwd=_meteor_dir(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.proc, self.starts = proc, self.starts + 1
        # Popen.__del__ keeps a running child's Popen (and so its stdin) alive: close stdin when this
        # object goes away instead, so that the JVM reads end-of-file and exits.
        weakref.finalize(self, _close_quietly, proc.stdin)
        threading.Thread(target=self._drain_stderr, args=(proc.stderr, self.stderr_tail),
                         name=f"meteor-stderr-{self.index}", daemon=True).start()
        try:
            _write_all(proc.stdin, _PING)
            answer = proc.stdout.readline()
        except (BrokenPipeError, OSError, ValueError):
            answer = b""
        if not answer:
            raise MeteorError(self._failure("did not start"))
        self.start_seconds = time.perf_counter() - began
        self.start_error = None

    def stop(self) -> None:
        """End the JVM (only from the process that started it: a forked child must not kill or
        write to its parent's JVM)."""
        proc, self.proc = self.proc, None
        if proc is None or os.getpid() != self.pid_owner:
            return
        for stream in (proc.stdin, proc.stdout):
            _close_quietly(stream)
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def _failure(self, what: str) -> str:
        status = None if self.proc is None else self.proc.poll()
        time.sleep(0.05)  # let the stderr thread read the JVM's last words
        tail = "\n".join(list(self.stderr_tail)[-15:]) or "(nothing on stderr)"
        return f"METEOR JVM {self.index} {what} (exit status {status}); its stderr ends with:\n{tail}"

    # --- scoring (caller holds self.lock) ---------------------------------------------------------
    def _read(self, n: int) -> list[bytes]:
        out, readline = [], self.proc.stdout.readline
        for _ in range(n):
            line = readline()
            if not line:
                raise _JvmDied("end of output")
            out.append(line)
        return out

    def _stats_once(self, lines: list[bytes]) -> list[bytes]:
        """The jar's answers to the SCORE request ``lines``, written by a thread while this one reads
        (pipelined), in order."""
        proc = self.proc
        failure: list[BaseException] = []

        def write():
            try:
                _write_all(proc.stdin, b"".join(lines))
            except (BrokenPipeError, OSError, ValueError) as exc:
                failure.append(exc)

        writer = threading.Thread(target=write, name=f"meteor-writer-{self.index}", daemon=True)
        writer.start()
        stats = self._read(len(lines))
        writer.join()
        if failure:
            raise _JvmDied(f"write failed: {failure[0]!r}")
        return stats

    def _eval_once(self, stats: list[str]) -> tuple[list[float], float]:
        """The jar's answer to pycocoevalcap's EVAL request (``Meteor.compute_score``) for the
        statistics lines ``stats``: the score of each, in order, and the aggregate (the jar sums the
        statistics and scores the totals: pycocoevalcap's corpus METEOR)."""
        # Meteor.compute_score: 'EVAL' + ' ||| {}'.format(stat) per caption, stat = line.decode().strip()
        eval_line = "EVAL" + "".join(" ||| " + s for s in stats) + "\n"
        try:
            _write_all(self.proc.stdin, eval_line.encode())
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise _JvmDied(f"write failed: {exc!r}") from None
        answers = self._read(len(stats) + 1)
        try:
            values = [float(a.strip()) for a in answers]
        except ValueError:
            message = self._failure(f"answered {str(answers)[:200]} instead of scores")
            self.stop()  # out of step with our requests: never reuse it
            raise MeteorError(message) from None
        return values[:-1], values[-1]

    def _score_once(self, lines: list[bytes]) -> list[float]:
        stats = self._stats_once(lines)
        return self._eval_once([s.decode().strip() for s in stats])[0]

    def _with_restart(self, once, lines: list[bytes]):
        """``once(lines)`` on this JVM, started if needed; a JVM that dies is restarted once and the
        part sent again. Raises JavaMissingError, MeteorError."""
        with self.lock:
            if not self.alive():
                self.start()
            try:
                return once(lines)
            except _JvmDied as exc:
                log.warning("METEOR JVM %d died (%s); restarting it once", self.index, exc)
                first = self._failure(f"died ({exc})")
            try:
                self.start()
                return once(lines)
            except _JvmDied as exc:
                raise MeteorError(f"{first}\nand again after a restart: " + self._failure(f"died ({exc})")) from None

    def score(self, lines: list[bytes]) -> list[float]:
        """Scores of the SCORE request ``lines`` (bytes ending in newline), in order (see
        :meth:`_with_restart`)."""
        return self._with_restart(self._score_once, lines)

    def statistics(self, lines: list[bytes]) -> list[str]:
        """The jar's sufficient-statistics lines for the SCORE request ``lines``, in order, stripped
        (see :meth:`_with_restart`)."""
        return [s.decode().strip() for s in self._with_restart(self._stats_once, lines)]

    def evaluate(self, stats: list[str]) -> tuple[list[float], float]:
        """The jar's EVAL answer for the statistics lines ``stats`` (see :meth:`_eval_once` and
        :meth:`_with_restart`)."""
        return self._with_restart(self._eval_once, stats)

    def start_quietly(self) -> None:
        """Start the JVM unless running; errors are kept in :attr:`start_error` and logged, not raised."""
        with self.lock:
            if self.alive():
                return
            try:
                self.start()
            except BaseException as exc:  # noqa: BLE001 - background start: report when scoring
                self.start_error = exc
                log.warning("METEOR JVM %d did not start: %s", self.index, exc)


class MeteorPool:
    """``size`` persistent METEOR 1.5 JVMs scoring one batch together.

    Parameters
    ----------
    size : int >= 1, number of JVMs (each ``-Xmx2G``, one core while scoring). ValueError otherwise.

    The JVMs start on first use, or earlier with :meth:`start`. The pool is thread-safe: each JVM is
    used under its own lock. Use it from the process that created it (:func:`get_pool` handles forks).
    """

    def __init__(self, size: int = 1):
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"a METEOR pool needs at least one JVM, got size={size!r}")
        self.size = size
        self.pid = os.getpid()
        self._jvms = [_Jvm(i) for i in range(size)]

    def start(self, wait: bool = False) -> None:
        """Start the JVMs that are not running, concurrently, each in its own thread.

        ``wait=False`` returns at once (errors are logged and raised by the next :meth:`score`);
        ``wait=True`` returns when every JVM has answered its first request (about 5-10 s of loading
        the English paraphrase table) and raises the first start error (JavaMissingError, MeteorError).
        """
        if not wait and shutil.which("java") is None:
            return
        threads = [threading.Thread(target=j.start_quietly, name=f"meteor-start-{j.index}", daemon=True)
                   for j in self._jvms]
        for thread in threads:
            thread.start()
        if wait:
            for thread in threads:
                thread.join()
            for jvm in self._jvms:
                if jvm.start_error is not None:
                    raise jvm.start_error

    @property
    def start_seconds(self) -> list[float | None]:
        """Per JVM, seconds its last start took until the first answer (None: not started)."""
        return [j.start_seconds for j in self._jvms]

    @property
    def processes(self) -> list[subprocess.Popen | None]:
        """The JVM subprocesses (None where not running); for tests and monitoring."""
        return [j.proc for j in self._jvms]

    def score(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """METEOR 1.5 of each candidate against its references.

        Parameters
        ----------
        candidates : m PTB-tokenised captions (any text; cleaned as :func:`captioneval.kernels.coco.meteor`).
        references : m non-empty lists of PTB-tokenised reference captions.

        Returns
        -------
        ndarray float64 (m,) in [0, 1], equal (``==``) to :func:`captioneval.kernels.coco.meteor`. The m
        captions are split into ``size`` contiguous parts scored concurrently, order kept.

        Raises
        ------
        ValueError : length mismatch or a candidate without references.
        JavaMissingError : ``java`` is not on PATH (with install instructions).
        MeteorError : a JVM failed twice on its part, or the pool is used in a forked child.
        """
        return np.asarray(self._run("score", candidates, references), dtype=float)

    def statistics(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> list[str]:
        """The METEOR 1.5 jar's sufficient statistics of each candidate against its references: the
        jar's answer to pycocoevalcap's ``Meteor._stat`` request (``SCORE ||| refs ||| hypothesis``),
        one whitespace-separated line of 23 numbers per caption, in order (the input of
        :class:`captioneval.kernels.corpus.MeteorCorpus`). Same inputs, splitting and errors as
        :meth:`score`."""
        return self._run("statistics", candidates, references)

    def score_and_corpus(self, candidates: Sequence[str],
                         references: Sequence[Sequence[str]]) -> tuple[np.ndarray, float]:
        """Per-caption METEOR 1.5 and pycocoevalcap's corpus METEOR from one pass over the jar.

        The statistics of every caption (:meth:`statistics`, split over the JVMs) are sent back in
        one ``EVAL`` request, as pycocoevalcap's ``Meteor.compute_score`` does; the jar answers each
        caption's score and the aggregate of the summed statistics.

        Returns
        -------
        (scores, corpus) : float64 ndarray (m,) in [0, 1], equal (``==``) to :meth:`score`; and the
        corpus METEOR (float in [0, 1], NaN for m = 0), equal to ``Meteor().compute_score``'s first
        value for the same captions in the same order.

        Raises the errors of :meth:`score`.
        """
        stats = self.statistics(candidates, references)
        if not stats:
            return np.zeros(0), float("nan")
        scores, corpus = self._jvms[0].evaluate(stats)
        return np.asarray(scores, dtype=float), corpus

    def _run(self, method: str, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> list:
        """``_Jvm.<method>`` over the SCORE lines of the captions, split into ``size`` contiguous
        parts run concurrently by threads; results in caption order."""
        if len(candidates) != len(references):
            raise ValueError(f"{len(candidates)} candidates but {len(references)} reference lists")
        for i, refs in enumerate(references):
            if len(refs) == 0:
                raise ValueError(f"candidate {i} has no reference captions")
        if os.getpid() != self.pid:
            raise MeteorError("this METEOR pool belongs to another process (forked); use meteor.get_pool()")
        m = len(candidates)
        if m == 0:
            return []
        require_java()
        # Meteor._stat: ' ||| '.join(('SCORE', ' ||| '.join(reference_list), hypothesis_str))
        lines = [
            " ||| ".join(("SCORE", " ||| ".join(_clean(r) for r in refs), _clean(cand))).encode() + b"\n"
            for cand, refs in zip(candidates, references)
        ]
        k = min(self.size, m)
        bounds = [round(i * m / k) for i in range(k + 1)]
        if k == 1:
            return getattr(self._jvms[0], method)(lines)
        results: list[list | None] = [None] * k
        errors: list[BaseException | None] = [None] * k

        def run(i: int) -> None:
            try:
                results[i] = getattr(self._jvms[i], method)(lines[bounds[i]:bounds[i + 1]])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors[i] = exc

        threads = [threading.Thread(target=run, args=(i,), name=f"meteor-part-{i}", daemon=True) for i in range(k)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for error in errors:
            if error is not None:
                raise error
        return [s for part in results for s in part]

    def close(self) -> None:
        """Stop every JVM (in the process that started them; in a forked child only forget them)."""
        for jvm in self._jvms:
            with jvm.lock:
                jvm.stop()


# --- this process's pool ----------------------------------------------------------------------------

_size = 1
_pool: MeteorPool | None = None
_pool_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # The parent's pool (and possibly a held lock) came along with fork(): forget both, never touch
    # the parent's JVMs from here.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def configure(size: int) -> None:
    """Set the number of JVMs of this process's pool (default 1: one JVM per Celery worker process,
    reused across chunks and runs). A running pool of another size is closed; the next
    :func:`meteor` or :func:`prestart` creates the new one. ValueError for size < 1."""
    global _size, _pool
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"a METEOR pool needs at least one JVM, got size={size!r}")
    with _pool_lock:
        _size = size
        if _pool is not None and _pool.size != size:
            old, _pool = _pool, None
            old.close()


def pool_size() -> int:
    """The configured size of this process's pool."""
    return _size


def get_pool() -> MeteorPool:
    """This process's pool, created with the configured size on first use; a pool inherited through
    ``os.fork`` (its ``pid`` is not ours) is replaced by a new one, never used."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = MeteorPool(_size)
        return _pool


def prestart() -> None:
    """Start this process's JVMs in the background now, so that the first METEOR batch does not wait
    for them (e.g. when a Celery worker process starts). Returns at once and raises nothing: without
    ``java`` on PATH it does nothing; a start failure is logged and raised by the next :func:`meteor`."""
    if DEFAULT_IMPLEMENTATION != "java" or shutil.which("java") is None:
        return
    try:
        get_pool().start(wait=False)
    except Exception:  # noqa: BLE001 - documented: never raises
        log.exception("METEOR prestart failed")


def meteor_and_corpus(candidates: Sequence[str], references: Sequence[Sequence[str]],
                      implementation: str | None = None) -> tuple[np.ndarray, float]:
    """Per-caption METEOR 1.5 and pycocoevalcap's corpus METEOR, from one pass: the Python scorer
    (:func:`captioneval.kernels.meteor_py.score_and_corpus`) or this process's pool of JVMs
    (:meth:`MeteorPool.score_and_corpus`). Same errors as :func:`meteor`."""
    if _implementation(implementation) == "python":
        from captioneval.kernels import meteor_py

        return meteor_py.score_and_corpus(candidates, references)
    return get_pool().score_and_corpus(candidates, references)


def statistics(candidates: Sequence[str], references: Sequence[Sequence[str]],
               implementation: str | None = None) -> list[str]:
    """The jar's sufficient statistics line of each caption (23 numbers, ``MeteorStats.toString``)
    from the chosen implementation (both give the same strings). Same errors as :func:`meteor`."""
    if _implementation(implementation) == "python":
        from captioneval.kernels import meteor_py

        return meteor_py.statistics(candidates, references)
    return get_pool().statistics(candidates, references)


def meteor(candidates: Sequence[str], references: Sequence[Sequence[str]],
           implementation: str | None = None) -> np.ndarray:
    """METEOR 1.5 of each candidate: float64 (m,) in [0, 1], equal (``==``) to
    :func:`captioneval.kernels.coco.meteor` (pycocoevalcap's ``Meteor.compute_score``), from the
    Python scorer or this process's pool of JVMs (``implementation``, default
    :data:`DEFAULT_IMPLEMENTATION`).

    Raises ValueError (length mismatch, a candidate without references, unknown implementation);
    Java: JavaMissingError (``java`` not on PATH, with install instructions), MeteorError (a JVM
    failed twice); Python: MeteorDataError (pycocoevalcap's data missing)."""
    if len(candidates) == 0 and len(references) == 0:
        return np.zeros(0)
    if _implementation(implementation) == "python":
        from captioneval.kernels import meteor_py

        return meteor_py.score(candidates, references)
    return get_pool().score(candidates, references)
