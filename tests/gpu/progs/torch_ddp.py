#!/usr/bin/env python3
"""A data-parallel PyTorch job over NCCL, one process per GPU, for torchrun.

    torchrun --standalone --nproc_per_node=N torch_ddp.py [--steps S] [--sleep-ms T]

Each rank trains the same MLP (DistributedDataParallel: gradients all-reduced
by NCCL every step) on data of its own, a function of the seed, the rank and
the step, so the run is deterministic. At the end each rank prints
'rank R checksum: <hex>' (SHA-256 of every parameter and optimizer state): the
same on every rank, and the same in every run with the same flags and GPUs.
'rank R step K' is printed as steps go, 'time: X ms/step' at the end.
"""
import argparse
import hashlib
import os
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--steps', type=int, default=300)
    p.add_argument('--width', type=int, default=4096)
    p.add_argument('--layers', type=int, default=4)
    p.add_argument('--batch', type=int, default=256)
    p.add_argument('--sleep-ms', type=int, default=0)
    p.add_argument('--print-every', type=int, default=10)
    p.add_argument('--seed', type=int, default=1)
    return p.parse_args()


def checksum(model, opt):
    import torch
    h = hashlib.sha256()
    for t in list(model.parameters()) + [v for s in opt.state.values() for v in s.values()
                                         if torch.is_tensor(v)]:
        h.update(t.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    a = parse()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, local = int(os.environ['RANK']), int(os.environ['LOCAL_RANK'])
    torch.cuda.set_device(local)
    dist.init_process_group('nccl', device_id=torch.device('cuda', local))
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width), torch.nn.GELU()]
    model = DDP(torch.nn.Sequential(*layers).cuda(), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device='cuda')
    t0 = time.time()
    for step in range(a.steps):
        gen.manual_seed(a.seed * 1000003 + rank * 7919 + step)
        x = torch.randn(a.batch, a.width, device='cuda', generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % a.print_every == 0:
            torch.cuda.synchronize()
            print('rank %d step %d' % (rank, step), flush=True)
        if a.sleep_ms:
            time.sleep(a.sleep_ms / 1000)
    torch.cuda.synchronize()
    print('time: %.2f ms/step' % ((time.time() - t0) * 1000 / a.steps), flush=True)
    print('rank %d checksum: %s' % (rank, checksum(model.module, opt)), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == '__main__':
    sys.exit(main())
