"""A plain PyTorch DDP script, as seed 002's author would write one, plus orch's report helper for its figures.

orch runs it one rank per container: `orch up --framework torch --workers 2 --script examples/torch_ddp.py --
--epochs 3`. It meets its peers through the environment orch sets (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE;
GLOO_SOCKET_IFNAME is set to the cluster network's interface), shards a synthetic data set with
DistributedSampler, and reports each epoch and its test accuracy (from its own weights) with orch_trainer.report.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from orch_trainer import report

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=32, help="per process, as in seed 002")
args = parser.parse_args()

distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("gloo")  # env:// from the variables orch set
rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)

torch.manual_seed(0)
x = torch.randn(4096, 20)
y = (x[:, :10].sum(1) > x[:, 10:].sum(1)).long()  # a rule the model can learn
train, test = TensorDataset(x[:3072], y[:3072]), (x[3072:], y[3072:])
sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler, num_workers=1)  # a worker: /dev/shm
model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
net = DistributedDataParallel(model) if distributed else model
optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

report.started(steps_per_epoch=len(loader))
began = time.perf_counter()
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    started, seen = time.perf_counter(), 0
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(xb), yb)
        loss.backward()
        optimizer.step()
        seen += len(yb)
        report.heartbeat()
    report.epoch(epoch + 1, samples=seen, seconds=time.perf_counter() - started, epochs=args.epochs,
                 loss=float(loss))
with torch.no_grad():
    accuracy = float((model(test[0]).argmax(1) == test[1]).float().mean())
print(f"rank {rank} of {world} via {os.environ.get('GLOO_SOCKET_IFNAME', 'no process group')}: test accuracy "
      f"{accuracy:.4f}", flush=True)
report.result(test_accuracy=accuracy, train_seconds=time.perf_counter() - began)
if distributed:
    dist.barrier()
    dist.destroy_process_group()
