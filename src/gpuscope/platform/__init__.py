"""What the host gives us to read: ELF files."""
