"""Writing outputs safely: one file, one trace directory, or every output of a run at once.

Rules (DEVELOPERS.md, "never a partially written output"):
- `-` is standard output.
- A path that is (or resolves to) a character device, a pipe or a socket (`/dev/null`,
  `/dev/stdout`, a FIFO) is streamed to; it is never replaced, never created.
  `/dev/stdout`, `/dev/stderr` and `/dev/fd/N` write to our own descriptor, so an
  appending shell redirect (`>>`) keeps its offset.
- A regular file is written through a temp file beside its real path (symlinks are
  followed, as a shell redirect does), keeping the old file's mode and owner, then
  renamed into place. A file with several hard links is staged whole first and then
  copied over in place, so that every link sees the new content.
- A trace directory is staged in a hidden sibling directory and renamed into place.
  An existing directory is replaced only when it is one of ours (its `manifest.json`
  names our generator); files in it that we did not write survive. A trace directory
  given as a symlink is written where the link points (the link stays).

`OutputSet` collects every output of one run: a pass stages its directory (it can be
read back, e.g. by `simulate=true`, before the run commits), the driver adds the `-o`
file, and `commit()` renames everything into place under a lock on each parent
directory, only after the whole pipeline succeeded. Two runs writing the same outputs
therefore never mix: the outputs are those of the run that committed last, all of them.
A failed or interrupted run leaves the previous outputs untouched. Streams are written
first: one that fails (`-o /dev/full`) installs nothing else of the run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import sys
import tempfile

from .jsonio import json_load

__all__ = ["OutputSet", "write_file", "is_stream_path", "expand_path", "OutputError"]

MANIFEST = "manifest.json"

_OWN_FDS = {"/dev/stdout": 1, "/dev/stderr": 2, "/proc/self/fd/1": 1, "/proc/self/fd/2": 2}


class OutputError(OSError):
    """An output cannot be written; str() is a one-line message naming the path."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot write '{path}': {reason}")
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return self.args[0]


def expand_path(path: str) -> str:
    """`~` and `~user` expanded, as a shell would have (an option value such as
    `chakra-dir=~/x` reaches us unexpanded)."""
    return os.path.expanduser(path) if path.startswith("~") else path


def _own_fd(path: str) -> int | None:
    if path in _OWN_FDS:
        return _OWN_FDS[path]
    for prefix in ("/dev/fd/", "/proc/self/fd/"):
        if path.startswith(prefix) and path[len(prefix) :].isdigit():
            return int(path[len(prefix) :])
    return None


def writes_stdout(path: str) -> bool:
    """Does writing `path` write our standard output (`-`, /dev/stdout, /dev/fd/1)?"""
    path = expand_path(path)
    return path == "-" or _own_fd(path) == 1


def is_stream_path(path: str) -> bool:
    """True when `path` must be streamed to: our own descriptors, or an existing
    character device, FIFO or socket (symlinks followed)."""
    if path == "-" or _own_fd(path) is not None:
        return True
    try:
        st = os.stat(path)
    except OSError:
        return False
    return not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)


def _reason(err: OSError) -> str:
    return err.strerror or str(err)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _stream(path: str, data: bytes) -> None:
    fd = 1 if path == "-" else _own_fd(path)
    try:
        if fd is not None:
            if fd == 1:
                sys.stdout.flush()
            elif fd == 2:
                sys.stderr.flush()
            _write_all(fd, data)
            return
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
    except BrokenPipeError:
        raise
    except OSError as err:
        raise OutputError(path, _reason(err)) from None


def _real_target(path: str) -> str:
    """The path a write lands on: symlinks followed (also dangling ones)."""
    return os.path.realpath(path)


def _stage_file(target: str, data: bytes) -> str:
    """Write `data` to a temp file beside `target`, with the mode (and owner) the final
    file must have; return its path."""
    directory = os.path.dirname(target) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    try:
        try:
            st = os.stat(target)
        except FileNotFoundError:
            st = None
        _write_all(fd, data)
        os.fsync(fd)
        if st is not None:
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
            if hasattr(os, "fchown") and (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
                with contextlib.suppress(OSError):
                    os.fchown(fd, st.st_uid, st.st_gid)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def _install_file(tmp: str, target: str) -> None:
    """Put the staged `tmp` in place of `target`."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        # Hard links: a rename would detach this name from the others. The data is
        # complete on disk already (staged), so copy it over in place.
        with open(tmp, "rb") as src, open(target, "r+b") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.truncate()
            dst.flush()
            os.fsync(dst.fileno())
        os.unlink(tmp)
        return
    os.replace(tmp, target)


def write_file(path: str, data: bytes) -> None:
    """Write one output file following the module's rules; raises OutputError."""
    path = expand_path(path)
    if is_stream_path(path):
        _stream(path, data)
        return
    target = _real_target(path)
    if os.path.isdir(target):
        raise OutputError(path, "is a directory")
    try:
        tmp = _stage_file(target, data)
    except OSError as err:
        raise OutputError(path, _reason(err)) from None
    try:
        _install_file(tmp, target)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(path, _reason(err)) from None


# ---------------------------------------------------------------------------
# trace directories
# ---------------------------------------------------------------------------


def _manifest_files(directory: str, generator: str) -> set[str] | None:
    """The files our manifest in `directory` says we wrote, or None if it is not ours."""
    try:
        with open(os.path.join(directory, MANIFEST)) as fh:
            manifest = json_load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("generator") != generator:
        return None
    written = manifest.get("written_files")
    if not isinstance(written, list):  # manifests of older versions: what they name
        written = list(manifest.get("files") or [])
        written += [MANIFEST, "comm_group.json", "system.json", "network.yml", "remote_memory.json"]
    return {str(x) for x in written if isinstance(x, str) and "/" not in x}


def check_dir_target(directory: str, generator: str) -> None:
    """Raise OutputError unless `directory` may receive a trace: absent, empty, or ours.

    Outside the commit's lock another run may swap the directory at any moment (renamed
    out, its staged copy renamed in): each question is asked once, and a directory gone
    meanwhile counts as absent."""
    try:
        st = os.stat(directory)  # follows a symlink to a directory
    except FileNotFoundError:
        if os.path.islink(directory):  # a dangling symlink
            raise OutputError(directory, "exists and is not a directory") from None
        return
    except OSError as err:
        raise OutputError(directory, _reason(err)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(directory, "exists and is not a directory")
    try:
        present = os.listdir(directory)
    except FileNotFoundError:
        return
    except OSError as err:
        raise OutputError(directory, _reason(err)) from None
    if present and _manifest_files(directory, generator) is None and os.path.isdir(directory):
        raise OutputError(
            directory,
            "exists and is not a trace directory written by stablehlo-costmodel; remove it or choose another chakra-dir",
        )


class _StagedDir:
    def __init__(self, directory: str, staged: str, generator: str) -> None:
        self.directory = directory
        self.staged = staged
        self.generator = generator


class _StagedFile:
    def __init__(self, path: str, target: str, staged: str | None, data: bytes | None) -> None:
        self.path = path
        self.target = target
        self.staged = staged  # temp file beside target (regular files)
        self.data = data  # streams are written at commit time


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: raised like KeyboardInterrupt so that a run's cleanup
    (staged outputs, temp dirs, a simulator it started) happens before the tool exits
    with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def termination_as_exception():
    """While a tool's main runs: SIGTERM and SIGHUP raise Terminated (their default
    action ends the process without running any cleanup); restored after."""
    def raise_terminated(signum, _frame):
        raise Terminated(signum)

    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(sig) == signal.SIG_DFL:
                old[sig] = signal.signal(sig, raise_terminated)
        except (ValueError, OSError):  # not the main thread
            pass
    try:
        yield
    finally:
        for sig, handler in old.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, handler)


@contextlib.contextmanager
def _signals_blocked():
    """Hold SIGINT/SIGTERM/SIGHUP while the renames of a commit run (delivered after)."""
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    except (AttributeError, ValueError, OSError):
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _locked_dirs(paths: list[str]):
    """flock each distinct parent directory (in a fixed order, so two runs cannot deadlock)."""
    import fcntl

    fds = []
    seen = set()
    try:
        keyed = []
        for p in paths:
            parent = os.path.dirname(p) or "."
            try:
                st = os.stat(parent)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key not in seen:
                seen.add(key)
                keyed.append((key, parent))
        for _key, parent in sorted(keyed):
            fd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class OutputSet:
    """Every output of one run, committed together (see the module docstring)."""

    def __init__(self) -> None:
        self._dirs: list[_StagedDir] = []
        self._files: list[_StagedFile] = []
        self.committed = False

    # -- staging -----------------------------------------------------------
    def stage_dir(self, directory: str, files: dict, generator: str) -> str:
        """Write `files` (name -> bytes, or a callable that writes the file to the binary
        handle it is given, in order) into a hidden sibling of `directory`; return the
        staged path (readable now, moved into place by commit())."""
        directory = os.path.abspath(expand_path(directory))
        if os.path.islink(directory):
            # a symlink to a directory is written through, as -o writes through a file's
            # link: the trace goes where it points (the link itself was swapped out)
            directory = os.path.realpath(directory)
        check_dir_target(directory, generator)
        parent = os.path.dirname(directory)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as err:
            raise OutputError(parent, _reason(err)) from None
        for prev in list(self._dirs):  # the same directory staged twice: the last wins
            if prev.directory == directory:
                shutil.rmtree(prev.staged, ignore_errors=True)
                self._dirs.remove(prev)
        try:
            staged = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.", suffix=".staged", dir=parent)
        except OSError as err:
            raise OutputError(directory, _reason(err)) from None
        try:
            os.chmod(staged, 0o777 & ~_umask())
            from .progress import progress

            for name, data in progress(files.items(), total=len(files), desc="writing", unit="file"):
                with open(os.path.join(staged, name), "wb") as fh:
                    if callable(data):  # a writer streaming a large file: data(fh)
                        data(fh)
                    else:
                        fh.write(data)
        except OSError as err:
            shutil.rmtree(staged, ignore_errors=True)
            raise OutputError(directory, _reason(err)) from None
        self._dirs.append(_StagedDir(directory, staged, generator))
        return staged

    def stage_file(self, path: str, data: bytes) -> None:
        path = expand_path(path)
        if is_stream_path(path):
            self._files.append(_StagedFile(path, path, None, data))
            return
        target = _real_target(path)
        if os.path.isdir(target):
            raise OutputError(path, "is a directory")
        try:
            staged = _stage_file(target, data)
        except OSError as err:
            raise OutputError(path, _reason(err)) from None
        self._files.append(_StagedFile(path, target, staged, None))

    @property
    def pending(self) -> bool:
        return bool(self._dirs or self._files)

    # -- commit / discard --------------------------------------------------
    def commit(self) -> None:
        """Move every staged output into place; raises OutputError (and then nothing of
        this run is in place, except for outputs already streamed)."""
        targets = [d.directory for d in self._dirs] + [f.target for f in self._files if f.staged]
        for f in self._files:
            for d in self._dirs:
                if f.staged and os.path.abspath(f.target).startswith(d.directory + os.sep):
                    self.discard()
                    raise OutputError(f.path, f"is inside the trace directory '{d.directory}', which a run replaces "
                                      "as a whole; write it elsewhere")
        try:
            # streams first (they cannot be undone): one that fails (/dev/full, a closed
            # pipe) leaves every file and directory of the run uninstalled
            for f in self._files:
                if f.data is not None:
                    _stream(f.path, f.data)
                    f.data = None
            with _locked_dirs(targets), _signals_blocked():
                for d in self._dirs:  # re-checked under the lock: another run may have won
                    check_dir_target(d.directory, d.generator)
                for d in self._dirs:
                    self._install_dir(d)
                for f in self._files:
                    if f.staged is None:
                        continue
                    try:
                        _install_file(f.staged, f.target)
                    except OSError as err:
                        raise OutputError(f.path, _reason(err)) from None
                    f.staged = None
        finally:
            self.discard()
        self._files = []
        self.committed = True

    def _install_dir(self, d: _StagedDir) -> None:
        directory = d.directory
        try:
            if not os.path.exists(directory):
                os.rename(d.staged, directory)
                d.staged = ""
                return
            previous = _manifest_files(directory, d.generator) or set()
            present = set(os.listdir(directory))
            foreign = present - previous
            if not foreign:
                # only our files: swap the whole directory (one atomic rename in, one out)
                old = f"{d.staged}.old"
                os.rename(directory, old)
                os.rename(d.staged, directory)
                d.staged = ""
                shutil.rmtree(old, ignore_errors=True)
                return
            # The user keeps files of their own here: replace ours one by one, drop the
            # ones of the previous trace that this one does not have, manifest last.
            new = sorted(os.listdir(d.staged), key=lambda n: n == MANIFEST)
            for name in new:
                os.replace(os.path.join(d.staged, name), os.path.join(directory, name))
            for name in previous - set(new):
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    os.unlink(os.path.join(directory, name))
        except OSError as err:
            raise OutputError(directory, _reason(err)) from None

    def discard(self) -> None:
        """Remove whatever is still staged (a failed or interrupted run)."""
        for d in self._dirs:
            if d.staged:
                shutil.rmtree(d.staged, ignore_errors=True)
        for f in self._files:
            if f.staged:
                with contextlib.suppress(OSError):
                    os.unlink(f.staged)
                f.staged = None
        self._dirs = []

    def __enter__(self) -> "OutputSet":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_dir(directory: str, files: dict[str, bytes], generator: str) -> str:
    """Stage and commit one trace directory on its own; returns its absolute path."""
    with OutputSet() as outs:
        outs.stage_dir(directory, files, generator)
        outs.commit()
    return os.path.abspath(expand_path(directory))

