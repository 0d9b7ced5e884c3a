"""`orch bench allreduce`'s results as a Markdown table and a plot of latency against size."""
from __future__ import annotations

from pathlib import Path

from orchestrator.bench import Row, known_transports


def human_size(size: int) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def markdown(rows: list[Row], header: str) -> str:
    """The table as Markdown, with what each transport is."""
    lines = [header, "", "| transport | placement | ranks | size | p50 µs | p99 µs | bus GB/s | vs host p50 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r.p50_us is None:
            lines.append(f"| {r.transport} | {r.placement} | {r.ranks} | {human_size(r.bytes)} | - | - | - | "
                         f"{r.note} |")
            continue
        lines.append(f"| {r.transport} | {r.placement} | {r.ranks} | {human_size(r.bytes)} | {r.p50_us:.0f} | "
                     f"{r.p99_us:.0f} | {r.busbw_gbps:.3f} | {f'{r.vs_host:.2f}x' if r.vs_host else '-'} |")
    lines += ["", *(f"- **{t.name}**: {t.what}." + (f" Not measured: {t.unavailable}." if t.unavailable else "")
                    for t in known_transports()),
              f"- **{', '.join(sorted({t.api + '-host' for t in known_transports()}))}**: the same script as bare "
              "processes of this host, from the images' own wheels (the reference)."]
    return "\n".join(lines) + "\n"


def plot(rows: list[Row], target: Path) -> None:
    """Latency (p50) against message size, a line per transport and rank count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colours = [plt.get_cmap("tab20")(i) for i in range(20)]  # more lines than the default cycle's ten colours
    for i, key in enumerate(sorted({(r.transport, r.ranks) for r in rows if r.p50_us})):
        points = sorted((r.bytes, r.p50_us) for r in rows if (r.transport, r.ranks) == key and r.p50_us)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=colours[i % len(colours)],
                linestyle="--" if key[0].endswith("-host") else "-", label=f"{key[0]}, {key[1]} ranks")
    ax.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="p50 latency (µs)",
           title="One all-reduce: orch's transports and bare host processes")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    from orchestrator.safeio import atomic_write_with

    atomic_write_with(target, lambda f: fig.savefig(f, format="png", dpi=110))
    plt.close(fig)
