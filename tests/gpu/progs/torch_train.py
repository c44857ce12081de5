#!/usr/bin/env python3
"""torch_train.py - a small transformer trained with PyTorch, for the real-GPU suite.

A decoder-only transformer (pre-LayerNorm, GELU MLP, causal attention written out
with matmuls so that every kernel has a deterministic implementation), bf16
autocast, AdamW, PyTorch's caching allocator (default, or expandable segments
through PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which drives the VMM
API directly). Data are synthetic and learnable: each sequence counts up in a
stride drawn per sample, so the loss goes down.

Deterministic: fixed seeds, torch.use_deterministic_algorithms(True),
CUBLAS_WORKSPACE_CONFIG=:4096:8 (set before torch is imported), no dropout, no
TF32. Two runs with the same flags on the same GPU and software print the same
checksum; that is what the suite compares across suspend/resume.

Output: "step N loss X" lines; "time: X ms/step (excluding sleep)" over the
steps after --warmup; "gpu_mem: allocated=B reserved=B peak=B"; last,
"checksum: <16 hex digits>" (SHA-256 over every parameter and every AdamW state
tensor, in a fixed order, as raw bytes).
"""
import argparse
import hashlib
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402  (after the environment it reads)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def attention(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)

    def forward(self, x, mask):
        x = x + self.attention(self.ln1(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Model(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = self.mask[:t, :t]
        for blk in self.blocks:
            x = blk(x, mask)
        return self.head(self.ln(x))


def make_batch(step, args, device):
    """Sequences start..start+stride*i (mod vocab): the same for a step, whatever the timing."""
    g = torch.Generator().manual_seed(args.seed * 1000003 + step)
    start = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
    stride = torch.randint(1, 8, (args.batch, 1), generator=g)
    seq = (start + stride * torch.arange(args.seq + 1)) % args.vocab
    seq = seq.to(device)
    return seq[:, :-1], seq[:, 1:]


def checksum(model, opt):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().contiguous().cpu().numpy().tobytes())
        for key in sorted(opt.state[p]):
            v = opt.state[p][key]
            if torch.is_tensor(v):
                h.update(v.detach().float().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of ms/step")
    ap.add_argument("--sleep-ms", type=int, default=0, help="sleep after each step")
    ap.add_argument("--print-every", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--ballast-gb", type=float, default=0.0,
                    help="extra device memory held all run (makes two jobs compete)")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    model = Model(args.vocab, args.d_model, args.layers, args.heads, args.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    nparams = sum(p.numel() for p in model.parameters())
    ballast = None
    if args.ballast_gb > 0:
        ballast = torch.zeros(int(args.ballast_gb * (1 << 30)) // 4, dtype=torch.float32, device=dev)
    print(f"torch_train: {nparams / 1e6:.1f} M parameters, {args.steps} steps, "
          f"torch {torch.__version__}, alloc_conf={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r}",
          flush=True)

    busy = 0.0
    t_mark = None
    for step in range(args.steps):
        if step == args.warmup:
            sync()
            t_mark = time.perf_counter()
        x, y = make_batch(step, args, dev)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.print_every and (step % args.print_every == 0 or step == args.steps - 1):
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        if args.sleep_ms:
            sync()
            if t_mark is not None:
                busy += time.perf_counter() - t_mark
            time.sleep(args.sleep_ms / 1000.0)
            if t_mark is not None:
                t_mark = time.perf_counter()
    sync()
    if t_mark is not None:
        busy += time.perf_counter() - t_mark
        timed = args.steps - args.warmup
        print(f"time: {busy * 1e3 / timed:.3f} ms/step (excluding sleep)", flush=True)
    if cuda:
        print(f"gpu_mem: allocated={torch.cuda.memory_allocated()} "
              f"reserved={torch.cuda.memory_reserved()} "
              f"peak={torch.cuda.max_memory_reserved()}", flush=True)
    if ballast is not None:
        assert float(ballast[-1]) == 0.0, "ballast changed"
    print(f"checksum: {checksum(model, opt)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
