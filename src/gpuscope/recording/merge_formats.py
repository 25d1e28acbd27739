"""Merge recordings of any format: Ingero inputs are converted, then the store merges gpuscope files."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from gpuscope.config import expand_home
from gpuscope.importers import import_file
from gpuscope.platform.links import resolve_refusing_planted_links
from gpuscope.recording.formats import Format, detect_format
from gpuscope.store.connect import connect_reader
from gpuscope.store.merge_recordings import ClockOffset, MergeInput, MergeReport, check_merge_request, merge_files


def merge_recordings(
    inputs: Sequence[str | os.PathLike[str]],
    dest: str | os.PathLike[str],
    *,
    force_node: str | None = None,
    rename: dict[str, str] | None = None,
    clock_offsets: Sequence[ClockOffset] = (),
    progress: Callable[[str], None] | None = None,
) -> MergeReport:
    """Merge gpuscope or Ingero recordings into a new database at ``dest``.

    ``force_node`` names sessions recorded without a node; ``rename`` maps an
    input path to the node name all its sessions get. Every input is checked
    before any work, and ``dest`` is replaced only when every input merged.

    Raises UsageError, DatabaseError, SchemaTooNewError, MergeConflictError
    or PlantedLinkError (see ``gpuscope.store.merge_recordings.merge_files``).
    """
    out_path = resolve_refusing_planted_links(dest)  # an output is written through no link another user planted
    paths = [_real(p) for p in inputs]
    renames = {_real(k): v for k, v in (rename or {}).items()}
    check_merge_request(paths, out_path, force_node, renames)
    formats = [detect_format(p) for p in paths]
    for path, fmt in zip(paths, formats, strict=True):
        if fmt is Format.GPUSCOPE:
            connect_reader(path).close()  # a newer schema is refused before any work
    with tempfile.TemporaryDirectory(prefix="gpuscope-merge-") as scratch:
        items = []
        for i, (path, fmt) in enumerate(zip(paths, formats, strict=True), start=1):
            source = path
            if fmt is Format.INGERO:
                if progress:
                    progress(f"converting {path}")
                source = Path(scratch) / f"import-{i}.db"
                import_file(path, source, node=renames.get(path) or force_node)
            items.append(MergeInput(path, source, fmt.value))
        return merge_files(
            items, out_path, force_node=force_node, rename=renames, clock_offsets=clock_offsets, progress=progress
        )


def _real(path: str | os.PathLike[str]) -> Path:
    """``path`` with every symlink resolved; a symlink loop stays as given (Path.resolve raises RuntimeError)."""
    return Path(os.path.realpath(expand_home(path)))
