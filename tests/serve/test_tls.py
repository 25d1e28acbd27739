"""The dashboard's self-signed certificate: made once, reused, and made again (private) when damaged."""

from __future__ import annotations

import stat
from pathlib import Path

from gpuscope.platform.tls import self_signed


def test_made_once_then_reused(tmp_path: Path) -> None:
    first = self_signed(tmp_path / "tls", ["localhost", "127.0.0.1"])
    again = self_signed(tmp_path / "tls", ["localhost", "127.0.0.1"])
    assert first.generated and not again.generated and again.fingerprint == first.fingerprint
    assert stat.S_IMODE(first.key.stat().st_mode) == 0o600


def test_a_damaged_pair_is_made_again_with_a_private_key(tmp_path: Path) -> None:
    made = self_signed(tmp_path / "tls", ["localhost"])
    made.cert.write_text("not a certificate")
    made.key.chmod(0o644)  # a key someone loosened: the new one must not inherit that mode
    again = self_signed(tmp_path / "tls", ["localhost"])
    assert again.generated and again.fingerprint != made.fingerprint
    assert stat.S_IMODE(again.key.stat().st_mode) == 0o600
