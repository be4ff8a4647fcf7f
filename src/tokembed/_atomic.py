"""Writing files so that nothing a user prepared is ever lost or half-written.

Every file goes to a temporary name in the same folder (``.NAME.tmp-XXXX``), is fsync'ed, then renamed
over its final name with ``os.replace`` (atomic on POSIX), and the folder is fsync'ed so the rename
survives a crash. A reader sees the old file or the new one, never a part.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "atomic_create",
    "atomic_open",
    "atomic_write",
    "atomic_write_json",
    "dumps_indented",
    "check_target",
    "fsync_dir",
    "interrupted_commit",
    "is_temp_file",
    "write_failure",
    "MARKER",
    "read_marker",
    "recover_staged",
    "remove_marked",
    "remove_unmarked_start",
    "staged_files",
    "write_marker",
]

MARKER = ".tokembed-marker.json"
_MARKER_FORMAT = "tokembed-marker"


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename inside ``path`` durable (no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # no space left, over quota, file too large


def write_failure(
    error: BaseException, path: str | os.PathLike, *, what: str = "", name: str | None = None
) -> OSError | None:
    """An error that names ``path`` (or ``name``) when ``error`` says a write ran out of room (a full disk, a quota,
    a file size limit), else None; its text says what to do. A library writing from C++ (torch.save: "iostream
    error", "unexpected pos") says less: its RuntimeError counts when the device has less than 1 MiB left (ask
    before removing what the failed write left)."""
    folder = Path(path).parent
    full = isinstance(error, OSError) and error.errno in _FULL
    failed_write = isinstance(error, RuntimeError) and _nearly_full(folder)
    if not (full or failed_write):
        return None
    try:
        free = f"{shutil.disk_usage(folder).free:,} bytes free there"
    except OSError:
        free = "its device is full or unavailable"
    code = error.errno if isinstance(error, OSError) and error.errno else errno.ENOSPC
    reason = os.strerror(code).lower() if full else f"no space left on device ({str(error).splitlines()[0][:120]})"
    return OSError(
        code,
        f"{reason}: could not write {name or path} ({free}); {what or 'nothing was replaced'}: free some space (or choose "
        "another output) and run the command again",
    )


def _nearly_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        return False


def is_temp_file(name: str) -> bool:
    """Whether ``name`` is a temporary file left by an interrupted atomic write."""
    return name.startswith(".") and ".tmp-" in name


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", *, sync_dir: bool = True):
    """Open a temporary file beside ``path``; when the block ends without error, fsync it and rename it to ``path``.

    On any error the temporary file is removed and ``path`` is left as it was. Text modes write UTF-8 with
    ``\\n`` line ends. Then the folder is fsynced, so that the rename survives a crash; with ``sync_dir=False`` the
    caller does that (`fsync_dir`) once after renaming several files into one folder, before anything relies on them.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-")
    os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the mode open() would
    try:
        text: dict[str, Any] = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
        with os.fdopen(fd, mode, **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        full = write_failure(e, path, what=f"{Path(path).name} is as it was")
        if full is not None:
            raise full from None
        raise
    if sync_dir:
        fsync_dir(path.parent)


def atomic_write(path: str | os.PathLike, data: bytes | memoryview | np.ndarray, *, sync_dir: bool = True) -> None:
    """Write ``data`` (bytes, or an array's raw bytes) to ``path`` atomically (``sync_dir``: see `atomic_open`)."""
    buf = np.ascontiguousarray(data).data.cast("B") if isinstance(data, np.ndarray) else memoryview(data)
    with atomic_open(path, "wb", sync_dir=sync_dir) as f:
        f.write(buf)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented, key-ordered JSON (stable bytes for equal content) atomically."""
    atomic_write(path, (dumps_indented(obj) + "\n").encode())


def dumps_indented(obj: Any) -> str:
    """``json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)``, character for character, faster: the
    standard library indents with its pure-Python encoder, so a container that holds no container (a manifest's
    token counts: an entry per id in the vocabulary) is written here by its C encoder, the indentation made part
    of the separator."""
    try:
        return _indented(obj, 0)
    except (_Unusual, TypeError, ValueError, RecursionError):  # (what cannot be written fails as json says)
        return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)


class _Unusual(Exception):
    """A dict with a container inside and a key that is not a string: left to the standard library."""


def _indented(obj: Any, level: int) -> str:
    if not isinstance(obj, (dict, list, tuple)) or not obj:
        return json.dumps(obj, indent=1, ensure_ascii=False)  # a scalar, {} or []
    pad, end = "\n" + " " * (level + 1), "\n" + " " * level
    values = obj.values() if isinstance(obj, dict) else obj
    if not any(issubclass(t, (dict, list, tuple)) for t in set(map(type, values))):  # flat: one C call, sorted as json
        flat = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=("," + pad, ": "))
        return flat[0] + pad + flat[1:-1] + end + flat[-1]
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise _Unusual
        body = [json.dumps(k, ensure_ascii=False) + ": " + _indented(v, level + 1) for k, v in sorted(obj.items())]
        return "{" + pad + ("," + pad).join(body) + end + "}"
    return "[" + pad + ("," + pad).join(_indented(v, level + 1) for v in obj) + end + "]"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_target(path: Path, overwrite: bool) -> None:
    """Refuse an existing ``path`` unless ``overwrite``, and a folder always."""
    if path.exists() and not overwrite:
        raise FileExistsError(
            f"{path} already exists; choose another name or pass overwrite=True (--overwrite) to replace it"
        )
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory; give a file name")


@contextlib.contextmanager
def atomic_create(path: str | os.PathLike, mode: str = "w", *, overwrite: bool = False):
    """`atomic_open` for a file the user names (an export, a report, a figure).

    Refuses an existing ``path`` unless ``overwrite``; on any error ``path`` is left as it was.
    """
    check_target(Path(path), overwrite)
    with atomic_open(path, mode) as f:
        yield f


# ----------------------------------------------------------------------------------------- marked folders


def write_marker(folder: Path, *, name: str | None = None, **record: Any) -> None:
    """Mark ``folder`` as made by tokembed: ``MARKER`` holds ``record`` and the folder's own name (or ``name``, the
    one it is about to be renamed to: until then the marker is inert)."""
    record = {**record, "format": _MARKER_FORMAT, "folder": name or folder.name}
    # ASCII: a folder name that is not UTF-8 (os.fsdecode's surrogates) is kept as JSON escapes, read back the same
    atomic_write(folder / MARKER, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of ``folder`` when tokembed made this very folder, else None (no marker, a damaged one, or
    one naming another folder: a copy the user made keeps the original's marker, which names the original)."""
    if folder.is_symlink() or not folder.is_dir():
        return None
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(marker, dict) and marker.get("format") == _MARKER_FORMAT and marker.get("folder") == folder.name
    return marker if ok else None


_MKDTEMP = re.compile(r"[a-z0-9_]{8}")  # the random part of tempfile.mkdtemp's names


def remove_unmarked_start(folder: Path, prefix: str) -> bool:
    """Remove ``folder`` if it is one of tokembed's ``mkdtemp(prefix=prefix)`` folders killed before its marker was
    in place: its name is ``prefix`` and mkdtemp's 8 random characters, and it holds nothing but a temporary file
    of the marker (so nothing of anyone's is lost). Returns whether it was removed."""
    if not (folder.name.startswith(prefix) and _MKDTEMP.fullmatch(folder.name[len(prefix) :])):
        return False
    if folder.is_symlink() or not folder.is_dir() or (folder / MARKER).exists():
        return False
    entries = list(folder.iterdir())
    if not all(is_temp_file(p.name) and p.name[1:].startswith(MARKER) and p.is_file() for p in entries):
        return False
    for p in entries:
        p.unlink()
    folder.rmdir()
    return True


def remove_marked(folder: Path, own: Iterable[str]) -> bool:
    """Delete the files named ``own`` in a folder tokembed marked, then its marker and the folder itself.

    Anything else in it (a file the user put there) is left where it is, with the marker, and a warning names
    it. Returns whether the folder is gone.
    """
    names = set(own) - {MARKER}
    for name in names:
        p = folder / name
        if "/" not in name and (p.is_file() or p.is_symlink()):  # a link: only the link goes
            p.unlink()
    for p in folder.iterdir():  # temporary files of its atomic writes (a marker being rewritten)
        if is_temp_file(p.name) and p.name[1:].startswith(MARKER):
            p.unlink(missing_ok=True)
    others = sorted(p.name for p in folder.iterdir() if p.name != MARKER)
    if others:
        more = f", ... ({len(others)} in all)" if len(others) > 5 else ""
        warnings.warn(
            f"kept {folder}: it holds files tokembed did not write there ({', '.join(others[:5])}{more}); "
            "move them out and delete the folder when they are safe",
            stacklevel=3,
        )
        return False
    (folder / MARKER).unlink(missing_ok=True)
    folder.rmdir()
    return True


# ----------------------------------------------------------------------------------------- file sets


def _stages(parent: Path, key: str) -> list[tuple[Path, dict[str, Any]]]:
    """The staging folders of ``key`` in ``parent`` that tokembed made, with their markers."""
    if not parent.is_dir():
        return []
    found = []
    for p in sorted(parent.glob(f".{glob.escape(key)}.staging-*")):  # the name finds, the marker decides
        if remove_unmarked_start(p, f".{key}.staging-"):
            continue
        marker = read_marker(p)
        if marker is not None and marker.get("role") == "staging" and marker.get("key") == key:
            found.append((p, marker))
    return found


def _committing_with(parent: Path, key: str) -> list[tuple[Path, dict[str, Any]]]:
    """The staging folders of other keys whose renames were interrupted and whose set has a file ``key.*`` (a
    Megatron export of both splits is staged under its train prefix's name). Only read: a set still being written
    is for its own key's runs to clear."""
    if not parent.is_dir():
        return []
    found = []
    for p in sorted(parent.glob(".*.staging-*")):
        m = read_marker(p) or {}
        stems = {Path(f).stem for f in m.get("files", []) if isinstance(f, str)}
        if m.get("role") == "staging" and m.get("key") != key and m.get("state") == "committing" and key in stems:
            found.append((p, m))
    return found


def interrupted_commit(parent: Path, key: str) -> Path | None:
    """A staging folder whose renames were interrupted (its files complete, some not yet in place): of ``key``, or
    of another set with a file ``key.*`` (`_committing_with`)."""
    stages = [*_stages(parent, key), *_committing_with(parent, key)]
    return next((p for p, m in stages if m.get("state") == "committing"), None)


def _commit(stage: Path, targets: Sequence[Path], remove: Sequence[Path]) -> None:
    """Rename the staged files to ``targets``; the last target is removed first and renamed last, so that the set
    exists (its last file is there) only when every file of it is the new one."""
    last = targets[-1]
    if (stage / last.name).exists():  # not yet renamed: any file at ``last`` is the old set's
        last.unlink(missing_ok=True)
        for p in remove:
            if p not in targets or (stage / p.name).exists():  # a target already renamed in is the new set's
                p.unlink(missing_ok=True)
    for t in targets:
        if (stage / t.name).exists():
            os.replace(stage / t.name, t)
    fsync_dir(last.parent)


def recover_staged(parent: Path, key: str) -> bool:
    """Finish what killed `staged_files` runs of ``key`` left in ``parent``: a commit that had begun is completed
    (its files were whole and synced before the first rename), also another key's whose set has a file ``key.*``
    (`_committing_with`); a set of ``key`` still being written is removed.

    Returns:
        Whether an interrupted commit of ``key`` was completed (its files are now in place: a rerun replaces them).
    """
    finished = False
    for stage, marker in [*_stages(parent, key), *_committing_with(parent, key)]:  # then no later run undoes ours
        targets = [parent / n for n in marker.get("files", []) if isinstance(n, str) and "/" not in n]
        if marker.get("state") == "committing" and targets:
            remove = [parent / n for n in marker.get("remove", []) if isinstance(n, str) and "/" not in n]
            _commit(stage, targets, remove)
            finished = finished or marker.get("key") == key  # another key's set: not a rerun of this export
        remove_marked(stage, [t.name for t in targets])
    return finished


@contextlib.contextmanager
def staged_files(targets: Sequence[Path], *, key: str, remove: Sequence[Path] = ()) -> Iterator[dict[Path, Path]]:
    """Write files that must change together: yields ``{target: where to write it}``, all in one hidden staging
    folder beside the targets; when the block ends without error every file is synced and the set is renamed into
    place (`_commit`: the last target last), and the files ``remove`` of an older set are deleted. On an error
    nothing at the targets has changed and the staging folder is gone.

    Args:
        targets: the files, all in one folder; the last one is the file whose presence makes the set exist
            (Megatron's ``.idx``: readers open it first).
        key: names the set's staging folders (``.KEY.staging-XXXX``), so the next run finds and finishes them.
        remove: files of an older set that the new set does not have (they go with the old set), or targets
            that must also go before the first rename (another prefix's ``.idx`` in a set of several datasets).
    """
    parent = targets[0].parent
    stage = Path(tempfile.mkdtemp(prefix=f".{key}.staging-", dir=parent))
    names = [t.name for t in targets]
    record: dict[str, Any] = {"role": "staging", "key": key, "files": names, "remove": [p.name for p in remove]}
    committing = False
    try:
        write_marker(stage, **record, state="writing")
        yield {t: stage / t.name for t in targets}
        for t in targets:
            with open(stage / t.name, "rb") as f:
                os.fsync(f.fileno())
            os.chmod(stage / t.name, 0o666 & ~_umask())
        fsync_dir(stage)
        committing = True  # from here on the staged files are the truth: a rerun finishes the renames
        write_marker(stage, **record, state="committing")
        _commit(stage, targets, remove)
    except BaseException as e:
        if not committing:
            with contextlib.suppress(OSError):
                remove_marked(stage, names)
        files = ", ".join(t.name for t in targets)
        full = write_failure(e, targets[0], name=f"{files} in {parent}", what="the files there are as they were")
        if full is not None and not committing:
            raise full from None
        raise
    remove_marked(stage, names)
