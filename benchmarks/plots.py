"""The benchmark's plots (matplotlib, no display): how each cost grows with the size of the work, each beside the
reference measured in the same run. draw(results, directory, suffix) writes the PNGs and returns their paths."""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, directory, name, suffix):
    path = os.path.join(directory, f"{name}{suffix}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def inbox_size(points, directory, suffix):
    lines = [p["lines"] for p in points]
    fig, (latency, throughput) = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind, colour in (("cached", "tab:blue"), ("uncached", "tab:orange")):
        latency.plot(lines, [p[kind + "_paced"]["p50"] for p in points], "o--", color=colour, label=f"{kind} p50")
        latency.plot(lines, [p[kind + "_paced"]["p99"] for p in points], "o-", color=colour, label=f"{kind} p99")
    first = points[0]["uncached_paced"]["p99"]
    latency.axhline(first * 1.5, color="tab:orange", linestyle=":", linewidth=1, label="target: 1.5x uncached p99 at 10^3")
    latency.set(xscale="log", yscale="log", xlabel="stored lines (1,000 devices, 100 people)", ylabel="ms",
                title="GET page latency at ~2,000 req/s")
    latency.legend(fontsize=8)
    for kind, colour in (("cached", "tab:blue"), ("uncached", "tab:orange")):
        throughput.plot(lines, [p[kind]["rps"] / p["nginx"]["rps"] for p in points], "o-", color=colour, label=kind)
    throughput.axhline(0.5, color="tab:orange", linestyle=":", linewidth=1, label="target for uncached: 0.5")
    throughput.set(xscale="log", xlabel="stored lines", ylabel="requests/s ÷ nginx (same page as a file)", ylim=(0, 1.1),
                   title="GET page throughput, 64 connections, vs nginx")
    throughput.legend(fontsize=8)
    return _save(fig, directory, "inbox-size", suffix)


def reads_during_writes(points, directory, suffix, uncached=None):
    rates = [max(p["rate"], 10) for p in points]
    fig, (latency, throughput) = plt.subplots(1, 2, figsize=(11, 4.2))
    latency.plot(rates, [p["paced"]["p50"] for p in points], "o--", label="p50")
    latency.plot(rates, [p["paced"]["p99"] for p in points], "o-", label="p99")
    latency.axhline(5, color="tab:red", linestyle=":", linewidth=1, label="target: p99 < 5 ms")
    latency.set(xscale="log", xlabel="lines/s written for other people (10 = none)", ylabel="ms", title="GET page at ~2,000 req/s")
    latency.legend(fontsize=8)
    quiet = points[0]["saturated"]["rps"]
    throughput.plot(rates, [p["saturated"]["rps"] / quiet for p in points], "o-", label="this page, cached per person")
    if uncached:
        # What every request would cost if any write re-rendered every page (the largest inbox, rendered afresh).
        throughput.axhline(uncached / quiet, color="tab:orange", linestyle=":", linewidth=1, label="each request rendered afresh")
    throughput.legend(fontsize=8)
    throughput.set(xscale="log", xlabel="lines/s written for other people (10 = none)", ylabel="requests/s ÷ with no writes",
                   ylim=(0, 1.2), title="GET page throughput, 64 connections")
    return _save(fig, directory, "reads-during-writes", suffix)


def wakeups(data, directory, suffix):
    points = data["connections"]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    x = range(len(points))
    # Older results have no libcurl reference: two bars then.
    curl = all("libcurl" in p for p in points)
    width = 0.27 if curl else 0.4
    offsets = (-width, 0, width) if curl else (-0.2, None, 0.2)
    ax.bar([i + offsets[0] for i in x], [p["h2load"]["per_second"] for p in points], width, label="h2load (the stand-in's limit)", color="tab:gray")
    if curl:
        ax.bar([i + offsets[1] for i in x], [p["libcurl"]["per_second"] for p in points], width, label="libcurl from C (the transport's library)",
               color="tab:orange")
    ax.bar([i + offsets[2] for i in x], [p["dispatcher"]["per_second"] for p in points], width, label="dispatcher", color="tab:blue")
    for i, p in enumerate(points):
        ax.annotate(f"{p['ratio']:.2f}", (i + offsets[2], p["dispatcher"]["per_second"]), ha="center", va="bottom", fontsize=9)
    ax.set_xticks(list(x), [f"{p['connections']} conn × 100 streams" for p in points])
    ax.set(ylabel="wake-ups (requests) per second", title="Wake-ups to the nghttpd APNs stand-in")
    ax.set_ylim(0, 1.3 * max(p["h2load"]["per_second"] for p in points))  # room for the legend above the bars
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, directory, "wakeups", suffix)


def backlog(data, directory, suffix):
    drain = data["drain"]
    fig, (left, claims) = plt.subplots(1, 2, figsize=(11, 4.2))
    t = [s["t"] for s in drain["samples"]]
    left.plot(t, [s["pending"] for s in drain["samples"]], color="tab:blue", label="wake-ups pending")
    left.set(xlabel="seconds since the service came back", ylabel="pending wake-ups", title=f"Draining {data['count']:,} wake-ups")
    rss = left.twinx()
    rss.plot(t, [s["rss_mb"] for s in drain["samples"]], color="tab:green", label="gateway RSS (MB)")
    rss.axhline(120, color="tab:green", linestyle=":", linewidth=1)
    rss.set_ylabel("RSS, MB (target < 120)")
    left.legend(loc="upper center", fontsize=8)
    rss.legend(loc="upper right", fontsize=8)
    c = drain["claims"]
    claims.plot([p["t"] for p in c], [p["p50_ms"] for p in c], "o--", markersize=3, label="claim p50")
    claims.plot([p["t"] for p in c], [p["p99_ms"] for p in c], "o-", markersize=3, label="claim p99")
    claims.set(xlabel="seconds since the service came back", ylabel="ms", title="Claiming 256 due wake-ups (per second)")
    claims.legend(fontsize=8)
    return _save(fig, directory, "backlog", suffix)


def channels(data, directory, suffix):
    pairs = [("webhook to nginx (204)", "plain", "webhook", "libcurl, same bodies")]
    if "sidecar" in data:
        pairs.append(("sidecar (acks at once)", "plain_sidecar", "sidecar", "plain writer, same frames"))
    fig, axes = plt.subplots(1, len(pairs), figsize=(5 * len(pairs), 4), squeeze=False)
    for ax, (title, plain, ours, plain_label) in zip(axes[0], pairs):
        values = [data[plain]["per_second"], data[ours]["per_second"]]
        ax.bar([plain_label, "durable hand-off"], values, color=["tab:gray", "tab:blue"])
        ax.annotate(f"{values[1] / values[0]:.2f}", (1, values[1]), ha="center", va="bottom")
        ax.set(ylabel="sends per second", title=title)
    return _save(fig, directory, "channels", suffix)


def relay(data, directory, suffix):
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = ["records\n(gateway -> relay -> phone)", "held commands\n(after a restart)"]
    ours = [data["records"]["per_second"], data["held"]["per_second"]]
    plain = [data["plain_reads"]["per_second"], data["plain_commands"]["per_second"]]
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], plain, width=0.4, color="tab:gray", label="the same, directly")
    ax.bar([x + 0.2 for x in xs], ours, width=0.4, color="tab:blue", label="through soulacy-relay")
    for x, (o, p) in enumerate(zip(ours, plain)):
        ax.annotate(f"{o / p:.2f}", (x + 0.2, o), ha="center", va="bottom")
    ax.set_xticks(list(xs), labels)
    ax.set(ylabel="per second", yscale="log", title="The relay path beside the direct one")
    ax.legend(fontsize=8)
    return _save(fig, directory, "relay", suffix)


def llm(data, directory, suffix):
    fig, ax = plt.subplots(figsize=(6, 4))
    values = sorted(data["acked_ms"])
    ax.plot(values, [(i + 1) / len(values) for i in range(len(values))])
    ax.axvline(10, color="tab:red", linestyle=":", linewidth=1, label="target: p99 < 10 ms")
    ax.set(xlabel="ms from the model's last token to the wake-up acknowledged", ylabel="fraction of runs", title="LLM runner overhead")
    ax.legend(fontsize=8)
    return _save(fig, directory, "llm-overhead", suffix)


def draw(results, directory, suffix=""):
    os.makedirs(directory, exist_ok=True)
    drawn = []
    for key, plot in (("inbox_size", inbox_size), ("wakeups", wakeups), ("backlog", backlog), ("channels", channels), ("llm", llm), ("relay", relay)):
        if key in results:
            drawn.append(plot(results[key], directory, suffix))
    if "reads_during_writes" in results:
        sized = results.get("inbox_size") or []
        drawn.append(reads_during_writes(results["reads_during_writes"], directory, suffix, sized[-1]["uncached"]["rps"] if sized else None))
    return drawn
