"""The only package that touches ctypes and libbpf: loader, ring buffer, wire mirror."""
