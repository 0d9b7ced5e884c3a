"""orch's own costs: the images' build times, the naive images, the sampler, input limits, Swarm's nodes, the demo's
steps, the disk limit and collect against a hostile worker."""
from __future__ import annotations

import statistics

from figures.core import FigureError, data, emit, num, table, machines


# -- images ----------------------------------------------------------------------------------------------
def build_table() -> None:
    """orch's image builds: cold, up to date and after a trainer change, and the image's size, per framework."""
    rows = []
    for title, rel in (("TensorFlow and MPI (`orch build`)", "benchmarks/results/build_times.json"),
                       ("PyTorch (`orch build --framework torch`)", "benchmarks/results/build_times_torch.json")):
        d = data(rel)
        by = {r["case"].split(" (")[0]: r for r in d["results"]}
        rows.append([title, num(by["cold"]["seconds"], ".0f", " s"), num(by["up to date"]["seconds"], ".1f", " s"),
                     num(by["trainer code changed"]["seconds"], ".1f", " s"),
                     num(by["cold"]["size_bytes"] / 1e9, ".2f", " GB")])
    emit(table(["image", "cold build", "up to date", "trainer code changed", "size"], rows, right=(1, 2, 3, 4)))


def naive_table() -> None:
    """orch's TensorFlow image against a naive Dockerfile of the same packages (benchmarks/targets.py)."""
    i = data("benchmarks/results/targets.json")["images"]
    emit(table(["build", "orch", "naive Dockerfile"], [
        ["cold", num(i["orch_cold_seconds"], ".0f", " s"), num(i["naive_cold_seconds"], ".0f", " s")],
        ["after a change to the trainer code", num(i["orch_warm_seconds"], ".1f", " s"),
         num(i["naive_warm_seconds"], ".1f", " s")],
        ["image size", num(i["orch_size_bytes"] / 1e9, ".2f", " GB"), num(i["naive_size_bytes"] / 1e9, ".2f", " GB")],
    ], right=(1, 2)))


# -- orch's own costs --------------------------------------------------------------------------------------
def sampler_table() -> None:
    """The stats sampler's CPU and the samples it keeps up with, against the docker CLI's own `stats` call."""
    d = data("benchmarks/results/sampler_overhead.json")
    emit(table(["containers", "sampler CPU % of one core", "samples per second (asked)", "one `docker stats` call"],
               [[r["containers"], num(r["sampler_cpu_percent"], ".2f"),
                 f"{num(r['samples_per_second'], '.1f')} ({r['asked_per_second']})",
                 num(r["docker_stats_cli_seconds_per_call"], ".2f", " s")] for r in d["results"]], right=(0, 1, 2, 3)))


def input_limits_table() -> None:
    """How fast the worst experiment files orch accepts or refuses are read (CPU seconds, median)."""
    d = data("benchmarks/results/input_limits.json")
    emit(table(["input", "CPU s (median)", "outcome"],
               [[r["input"], num(r["cpu_s_median"], ".4f"), r["outcome"].split(";")[0]] for r in d["rows"]],
               right=(1,)))


def swarm_nodes_table() -> None:
    """Each step of a 3-worker job across a two-node swarm on this machine (benchmarks/swarm_nodes.py)."""
    d = data("benchmarks/results/swarm-nodes.json")
    emit(table(["step", "seconds"], [[step, num(seconds, ".1f")] for step, seconds in d["steps"]], right=(1,)))


def slurm_table() -> None:
    """wall − train of the same 3-worker job on Compose and on Slurm, in turn (benchmarks/slurm_vs_compose.py)."""
    d = data("benchmarks/results/slurm.json")
    w = d["workload"]
    rows = [[name, num(r["wall_p50"], ".1f"), num(r["train_p50"], ".1f"),
             f"**{r['overhead_p50']:.1f}** ({r['overhead_min']:.1f}–{r['overhead_max']:.1f})", num(r["accuracy"], ".4f")]
            for name, r in d["setups"].items()]
    emit(table(["setup", "wall s", "train s", "wall − train s (range)", "test accuracy"], rows, right=(1, 2, 3, 4)))
    emit("")
    emit(f"Medians of {d['repeats']} repeats of {w['workers']} workers, {w['samples']:,} MNIST images, "
         f"{w['epochs']} epoch(s), on {d['cores']} cores. Charliecloud's folder of the image is made once per "
         f"build, in {d['stage_seconds']:.0f} s here.")


def podman_table() -> None:
    """The same job on 1 and 3 workers on Docker and on Podman, in turn (benchmarks/podman_vs_docker.py)."""
    d = data("benchmarks/results/podman.json")
    w = d["workload"]
    rows = [[r["engine"], str(r["workers"]), num(r["wall_p50"], ".1f"), num(r["train_p50"], ".1f"),
             f"**{r['overhead_p50']:.1f}** ({r['overhead_min']:.1f}–{r['overhead_max']:.1f})", num(r["accuracy"], ".4f")]
            for r in d["setups"].values()]
    emit(table(["engine", "workers", "wall s", "train s", "wall − train s (range)", "test accuracy"], rows,
               right=(1, 2, 3, 4, 5)))
    emit("")
    ratios = ", ".join(f"{engine} {ratio:.2f}" for engine, ratio in d["ratios"].items())
    emit(f"Medians of {d['repeats']} repeats of {w['samples']:,} MNIST images, {w['epochs']} epoch(s), at the same "
         f"global batch, on {d['cores']} cores. T(3)/T(1) of the train time: {ratios}. Copying {len(d['pushed'])} "
         f"images (the bases and TensorFlow's two) from Docker to Podman (`orch push --to-engine podman`) took "
         f"{d['push_seconds']:.0f} s, once per build.")


def podman_alone_table() -> None:
    """The main job on a host where only Podman answers (benchmarks/podman_alone.py): each step's time with Docker's
    daemon stopped, and each worker's accuracy beside the same job's on Docker."""
    d = data("benchmarks/results/podman_alone.json")
    if d["docker_answered_while_stopped"] or d["left_on_podman"]:
        raise FigureError("podman_alone.json: Docker answered while stopped, or the runs left containers on Podman")
    steps = [s for s in d["steps"] if not s["command"].startswith("orch push")]
    emit(table(["with Docker's daemon stopped", "exit", "seconds"],
               [[f"`{s['command']}`", s["exit"], num(s["seconds"], ".0f")] for s in steps], right=(1, 2)))
    emit("")
    runs = d["runs"]
    workers = sorted({int(key.rsplit("-", 1)[1]) for key in runs})
    emit(table(["workers", "test accuracy on Podman, each worker", "on Docker, each worker"],
               [[n, ", ".join(f"{a:.4f}" for a in runs[f"podman-{n}"]["test_accuracy"]),
                 ", ".join(f"{a:.4f}" for a in runs[f"docker-{n}"]["test_accuracy"])] for n in workers], right=(0,)))
    emit("")
    push = next(s for s in d["steps"] if s["command"].startswith("orch push"))
    w = d["workload"]
    images = ("none of orch's images" if not d["images_before_build"] else
              f"{len(d['images_before_build'])} of orch's images already")
    wheels = "its wheels already in orch's cache" if d["wheels_cached_before_build"] else "its wheels downloaded first"
    emit(f"{w['samples']:,} MNIST images, {w['epochs']} epochs, the main job's global batch, on {d['cores']} cores; the build "
         f"started with {images} on Podman, {wheels}. Then, "
         f"with Docker's daemon started again, `{push['command']}` copied the images built on Podman to Docker in "
         f"{push['seconds']:.0f} s, and the same two jobs ran on Docker. "
         + ("Every worker's accuracy is the same on both engines." if d["same_accuracy"] else
            "The accuracies differ between the engines."))


# -- what `make demo` prints (benchmarks/demo.py) ------------------------------------------------------------
DEMO = "benchmarks/results/demo.json"


def demo_table(framework: str = "tensorflow", width: int = 200) -> None:
    """The comparison `orch collect` prints for the demo's 1-vs-3 pair of ``framework``, rendered by orch's own table
    from the committed `orch collect --format json` of a `make demo` run."""
    from rich.console import Console

    from orchestrator.cli.tables import comparison_table

    d = data(DEMO)
    console = Console(width=width, record=True, color_system=None, force_terminal=False, file=open("/dev/null", "w"))
    console.print(comparison_table(d["comparisons"][framework]["comparison"]))
    emit("```\n" + console.export_text().rstrip() + "\n```")


def demo_source() -> None:
    """How long the demo took, and where."""
    d = data(DEMO)
    steps = dict(d["steps"])
    sweep = next(s for name, s in steps.items() if name.startswith("orch experiment"))
    emit(f"On {machines.describe(d['machine'])}, once the images existed, the demo took "
         f"{d['seconds']:.0f} s ({sweep:.0f} s of it the quick sweep; `python benchmarks/demo.py` runs "
         "its steps and times each).")


# -- the disk limit (benchmarks/disk_limit.py) -----------------------------------------------------------------
def disk_limit_table() -> None:
    """What writers at several speeds leave under --disk-limit, and which kernel limits this engine offers."""
    d = data("benchmarks/results/disk_limit.json")
    limit = d["limit_mib"]
    rows = [["as fast as the disk takes it" if not r["speed_mb_s"] else f"{r['speed_mb_s']:g} MB/s",
             f"{r['shape']} ({r['replicas']} replica{'s' if r['replicas'] > 1 else ''})",
             f"{statistics.median(r['written_mib']):.0f} ({max(r['written_mib']):.0f})",
             f"{100 * max(r['over_share']):.0f}%", r["containers_left"]] for r in d["rows"]]
    emit(table(["each replica writes", "shape", f"MiB left under a {limit} MiB limit, median (max)",
                "over the limit, at most", "containers left"], rows, right=(2, 3, 4)))
    emit("")
    emit(table(["a limit the kernel enforces", "here", "what it costs"],
               [[p["limit"], "works" if p["works"] else "not available", p["cost"]] for p in d["probes"]]))


# -- collect against a hostile worker (benchmarks/collect_bounds.py) --------------------------------------------
def collect_bounds_table() -> None:
    """`orch collect`'s wall time, CPU and peak memory against how much one worker wrote."""
    d = data("benchmarks/results/collect_bounds.json")
    rows = [[f"{r['hostile_mib']:g} MiB" if r["hostile_mib"] else "none (every worker normal)",
             f"{num(r['wall_s_median'], '.1f')} ({num(r['wall_s_max'], '.1f')})", num(r["cpu_s_median"], ".1f"),
             f"{num(r['peak_rss_mb_median'], '.0f')} ({num(r['peak_rss_mb_max'], '.0f')})"] for r in d["rows"]]
    emit(table(["records one worker wrote", "wall s, median (max)", "CPU s", "peak memory MB, median (max)"], rows,
               right=(1, 2, 3)))
    emit(f"\n{d['repeats']} repeats of each, a whole `orch collect` process each time, on "
         f"{machines.describe(d['machine']) if isinstance(d.get('machine'), dict) else d.get('machine')}.")
