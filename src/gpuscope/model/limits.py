"""Bounds that every interface applies alike: the CLI's options, the API's parameters and MCP's arguments."""

from __future__ import annotations

PID_MIN = 1
PID_MAX = 4_194_304  # the kernel's largest pid_max (PID_MAX_LIMIT on 64-bit)
SESSION_ID_MAX = 2**63 - 1  # a session number is an SQLite integer key
