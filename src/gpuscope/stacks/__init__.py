"""Call stacks of CUDA calls: decode kernel records, name native and Python frames, store them deduplicated."""
