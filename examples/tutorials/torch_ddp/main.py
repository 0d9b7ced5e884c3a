# A PyTorch DDP script in the shape of PyTorch's examples, launched by torchrun: it reads torchrun's environment
# (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR), meets over gloo, loads MNIST with
# torchvision.datasets.MNIST(download=True), shards it with a DistributedSampler, and reports each rank's test
# accuracy from its own weights. Nothing here knows orch; with torchvision on orch's PyTorch image:
#   orch up --framework torch --script examples/tutorials/torch_ddp/main.py --requirements vision.txt -j 2x2
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(16 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def main():
    parser = argparse.ArgumentParser(description="DDP on MNIST")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--data", default="../data", help="torchvision's root")
    args = parser.parse_args()

    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    print(f"rank {rank} of {world_size} (local rank {local_rank}), master {os.environ['MASTER_ADDR']}", flush=True)

    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train = datasets.MNIST(args.data, train=True, download=True, transform=transform)
    test = datasets.MNIST(args.data, train=False, download=True, transform=transform)
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(0)
    model = DDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        started, seen = time.perf_counter(), 0
        for images, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            seen += len(labels)
        print(f"epoch {epoch}: {seen} samples on this rank, loss {loss.item():.4f}, "
              f"{time.perf_counter() - started:.1f}s", flush=True)

    model.eval()
    correct = 0
    with torch.no_grad():
        for images, labels in DataLoader(test, batch_size=1000):
            correct += (model(images).argmax(1) == labels).sum().item()
    print(f"rank {rank}: test accuracy {correct / len(test):.4f} on {len(test)} images", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
