"""SQLite storage: one writer, read-only readers, recorded migrations."""
