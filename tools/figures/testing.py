"""How long the tests take (benchmarks/ci_time.py) and how many mutants they kill (benchmarks/mutation.py)."""
from __future__ import annotations


from figures.core import FigureError, data, emit, table, machines


# -- how long the tests take (benchmarks/ci_time.py) ---------------------------------------------------------
CI = "benchmarks/results/ci.json"


def test_times_table() -> None:
    """make test-fast (a clean clone's first run and the next) and .ci/run from a clean clone, as measured."""
    d = data(CI)
    rows = [[f"`make test-fast`, {f['run']}", f"{f['seconds']:.0f} s", f["pytest"] or "—"] for f in d["fast"]]
    ci = d.get("ci", {})
    if ci:
        stages = "; ".join(f"{s['stage']} {s['seconds']:.0f} s" for s in ci.get("stages", []))
        if "live_cpu" in ci:
            cpu = ci["live_cpu"]
            stages += (f"; the live tier kept {cpu['cores_busy']:.2f} of {cpu['cores']} cores busy, "
                       f"{cpu['cpu_seconds']} CPU-seconds in {cpu['seconds']} s")
        rows.append([f"`bash .ci/run`, a clean clone{' with nothing cached' if ci.get('cold') else ''}",
                     f"{ci['seconds'] / 60:.1f} min", f"{ci['pytest']}" + (f" ({stages})" if stages else "")])
    emit(table(["what", "took", "pytest"], rows, right=(1,)))
    ci_commit, ci_machine = ci.get("commit", d["commit"]), ci.get("machine", d["machine"])
    command = "`python benchmarks/ci_time.py --cold` (with `--skip-ci`, `make test-fast` alone)"
    if ci_machine != d["machine"]:  # measured at different times on different machines: each names its own
        emit(f"\nMeasured with {command}: `make test-fast` at commit {d['commit']} on "
             f"{machines.describe(d['machine'])}; `.ci/run` at commit {ci_commit} on {machines.describe(ci_machine)}.")
        return
    commits = (f"commit {d['commit']}" if ci_commit == d["commit"] else
               f"`make test-fast` at commit {d['commit']}, `.ci/run` at commit {ci_commit}")
    emit(f"\nOn {machines.describe(d['machine'])}, {commits}: {command}.")


def live_tier_floor() -> None:
    """The least time the measured live tier's CPU work allows on its machine's cores, however its tests are
    scheduled, and the least .ci/run then takes with the images built before it."""
    ci = data(CI).get("ci", {})
    if "live_cpu" not in ci:
        raise FigureError(f"{CI}: its .ci/run has no live tier CPU line; run benchmarks/ci_time.py again")
    stages = {s["stage"]: s["seconds"] for s in ci.get("stages", [])}
    if "the images were ready" not in stages:
        raise FigureError(f"{CI}: its .ci/run has no time for the images; run benchmarks/ci_time.py again")
    cpu, ready = ci["live_cpu"], stages["the images were ready"]
    floor = cpu["cpu_seconds"] / cpu["cores"]
    emit(f"{cpu['cpu_seconds']} CPU-seconds on {cpu['cores']} cores take at least {floor:.0f} s ({floor / 60:.1f} min) for "
         f"the live tier with every core busy all the time, where it took {cpu['seconds']} s; after the images, ready "
         f"{ready:.0f} s in, at least {(ready + floor) / 60:.1f} min in all.")


def slowest_tests_table(which: str = "ci") -> None:
    """The ten slowest test phases of a measured run, from pytest's own durations."""
    d = data(CI)
    rows = d["ci"]["slowest"] if which == "ci" else d["fast"][0]["slowest"]
    emit(table(["seconds", "phase", "test"], [[f"{r['seconds']:.1f}", r["phase"], f"`{r['test']}`"] for r in rows],
               right=(0,)))


# -- tests that can fail (benchmarks/mutation.py) -------------------------------------------------------------
def mutation_table() -> None:
    """Per module of the pure core: mutmut's mutants, how many the tests killed, how many survived, and how many of
    those are explained as equivalent (benchmarks/mutation_equivalent.json); and which modules were mutated in part."""
    d = data("benchmarks/results/mutation.json")
    rows = [[f"`{m['path']}`" + (" (part)" if m["functions"] else ""), m["mutants"], m["killed"],
             m["survived"] + m.get("timeout", 0), m["equivalent"]] for m in d["modules"]]
    rows.append(["all", *[sum(r[i] for r in rows) for i in range(1, 5)]])
    emit(table(["module", "mutants", "killed", "survived", "explained as equivalent"], rows, right=(1, 2, 3, 4)))
    emit("")
    for m in d["modules"]:
        if m["functions"]:
            emit(f"- `{m['path']}` in part: {m['why_functions']} ({', '.join(f'`{f}`' for f in m['functions'])}).")
    if d.get("not_run"):
        emit(f"- Not run yet: {', '.join(f'`{path}`' for path in d['not_run'])}.")
    emit(f"\n{d['tool']}, each module against its own tests: `python benchmarks/mutation.py`.")
