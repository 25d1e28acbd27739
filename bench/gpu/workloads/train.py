"""A small GPT-style model trained with AMP (fp16 + GradScaler) on synthetic tokens: the realistic loop.

Run by ``bench/gpu/validate.py``, untraced, under ``gpuscope trace`` and under
torch.profiler. Prints one JSON line: steps/s over the timed steps and, for the
count check, what the script itself did inside its measured window.

    python train.py --steps 300 [--profile on [--trace-out F.json]]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos
        for b in self.blocks:
            x = b(x, self.mask)
        return self.head(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument(
        "--profile", choices=["none", "on"], default="none", help="torch.profiler (CPU + CUDA) over the measured steps"
    )
    ap.add_argument("--trace-out", help="with --profile on: write its Chrome trace here (after the measured window)")
    a = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = Gpt(a.vocab, a.dim, 8, a.layers, a.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    loss_fn = nn.CrossEntropyLoss()
    counts = {"item": 0, "synchronize": 0}

    def step(i: int) -> None:
        idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev)
        with torch.autocast("cuda", dtype=torch.float16):
            logits = model(idx[:, :-1])
            loss = loss_fn(logits.reshape(-1, a.vocab), idx[:, 1:].reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)  # reads found_inf on the host: one device-to-host copy and wait per step
        scaler.update()
        opt.zero_grad(set_to_none=True)
        if i % a.log_every == 0:
            loss.item()
            counts["item"] += 1

    def sync() -> None:
        torch.cuda.synchronize()
        counts["synchronize"] += 1

    for i in range(a.warmup):
        step(i)
    sync()
    seg_before = torch.cuda.memory_stats().get("segment.all.allocated", 0)

    prof = None
    if a.profile != "none":
        from torch.profiler import ProfilerActivity, profile, record_function

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    # The measured window: no CUDA call is made between the two clock reads and the window's edges.
    counts = {"item": 0, "synchronize": 0}
    time.sleep(0.05)
    t0 = time.monotonic_ns()
    if prof is not None:
        window = record_function("gs_window")
        window.__enter__()
    for i in range(a.steps):
        step(i)
    sync()
    if prof is not None:
        window.__exit__(None, None, None)
    t1 = time.monotonic_ns()
    time.sleep(0.05)
    if prof is not None:
        prof.__exit__(None, None, None)
        if a.trace_out:
            prof.export_chrome_trace(a.trace_out)
    stats = torch.cuda.memory_stats()
    print(
        json.dumps(
            {
                "steps": a.steps,
                "steps_per_s": a.steps / ((t1 - t0) / 1e9),
                "window_ns": [t0, t1],
                "made": counts,
                "scaler_steps": a.steps,
                "segments_in_window": stats.get("segment.all.allocated", 0) - seg_before,
                "segments_total": stats.get("segment.all.allocated", 0),
                "params": sum(p.numel() for p in model.parameters()),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
