"""The figures of orch's README and manual, drawn from the committed result files: this package's index.

Every measured figure in README.md and docs/ (a table, a number in a sentence, a plot) is the output of a function
of one of this package's modules (one per subject: headline.py, floor.py, experiments.py, costs.py, testing.py,
peers.py; core.py holds what they share), named here and called from a cog block in the page:

    <!-- [[[cog figures.headline_table() ]]] -->
    ...what the function prints...
    <!-- [[[end]]] -->

`make figures` runs the blocks and writes their output into the pages (and draws the plots); `make docs` runs them
again and fails, naming the page and the figure, where the committed text is not what the data gives
(tools/docs_check.py). A function prints Markdown and names every result file it reads through ``data()``, so a
failure can say which file the figure comes from.

Each figure says what kind of ratio it is: the headline's T(N)/T(1) is a training-time ratio (the training loop
alone, the same work at every N), a wall ratio counts start-up and teardown too, T(N)/floor(N) compares with what
this machine allows (floor.py), and start-up is wall − train.
"""
from __future__ import annotations

from figures.core import FLOOR, FLOOR_JAX, FLOOR_TRANSPORT, HEADLINE, FigureError, ROOT, data, emit, link, page, set_page  # noqa: F401
from figures.headline import (  # noqa: F401
    headline_floor_table, headline_plot, headline_ratio, headline_source, headline_table,
)
from figures.floor import (  # noqa: F401
    ALLREDUCE, allreduce_table, floor_accuracy_table, floor_detail_table, floor_source, floor_table,
    processes_source, processes_table, start_table, transport_table,
)
from figures.experiments import experiment_source, experiment_table  # noqa: F401
from figures.costs import (  # noqa: F401
    DEMO, build_table, collect_bounds_table, demo_source, demo_table, disk_limit_table, input_limits_table,
    naive_table, podman_alone_table, podman_table, sampler_table, slurm_table, swarm_nodes_table,
)
from figures.testing import CI, live_tier_floor, mutation_table, slowest_tests_table, test_times_table  # noqa: F401
from figures.peers import (  # noqa: F401
    PEERS, PEER_NAMES, PEER_SHORT, SCRIPT_NAMES, peers_behind, peers_kill_table, peers_summary_table, peers_table,
)
