"""Holds ``argv[1]`` MiB of GPU memory and keeps the GPU busy with matrix products until its stdin closes: a process
whose GPU use the tests read. Prints ``ready`` once it holds the memory."""

import sys
import threading

import torch

held = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("ready", flush=True)
while not stop.is_set():
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
