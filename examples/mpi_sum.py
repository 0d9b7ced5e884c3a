"""A plain mpi4py script, as seed 001's author would write one: every rank contributes its number, and each
learns the sum. orch runs it one rank per container: `orch up --framework mpi --workers 3 --script
examples/mpi_sum.py`. It needs no orch code; it writes what it found into its own output folder."""
import os
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank + 1, op=MPI.SUM)
line = f"rank {comm.rank} of {comm.size} on {socket.gethostname()}: sum {total}"
print(line, flush=True)
with open(os.path.join(os.environ.get("ORCH_OUTPUT_DIR", "."), "sum.txt"), "w") as f:
    f.write(line + "\n")
