"""One way to open a recording, whatever wrote it.

Every reader (``explain``, ``query``, ``export``, ``stacks``, ``diff``, the
Python API and the servers) opens a recording here. A gpuscope database is
opened read-only as it is; a database recorded by Ingero is converted once
into gpuscope's schema and the cached conversion is opened instead, so the
user's file is only ever read.

``gpuscope.recording.merge_formats`` merges recordings of either format into a new one.
"""

from gpuscope.recording.formats import Format, detect_format
from gpuscope.recording.open import as_gpuscope_file, conversion_cache_dir, open_recording, open_recording_meanwhile

__all__ = [
    "Format",
    "as_gpuscope_file",
    "conversion_cache_dir",
    "detect_format",
    "open_recording",
    "open_recording_meanwhile",
]
