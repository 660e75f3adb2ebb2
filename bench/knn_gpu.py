"""knn-gpu: exact kNN on one NVIDIA GPU, Spillway's PSB and fused brute force against PyTorch, and
Spillway's CPU path on the same machine's cores. Writes the page `knn-gpu.md` and `knn-gpu.json`.

    python3 bench/knn_gpu.py --out DIR [--points 1000000] [--queries 10000] [--runs 3]
        [--latency 20] [--cpu-queries 1000] [--dims 2,4,8,16,32,64] [--ks 1,10,32,100]

It runs on the GPU machine (`scripts/gpu-check` builds the extension on a CPU machine, carries it
there and runs the GPU tests and this in one go), so it is not a part of `bench/run.py`, whose
peers are CPU programs on this project's usual machine; the page is this one run's output, as a
harness page is.

The data are the CPU page's (`knn_peers.generate`, the same seeds): N points uniform in
[0, 10^4)^d, or the seed's mixture of 100 Gaussian clusters (centres uniform in the same cube,
equal shares, deviation 40 on every axis: the small spread); float32; queries drawn the same way.
Per (distribution, d), the k-means tree is built on every core and copied to the GPU by one
untimed query. Per (distribution, d, k), every contender answers the whole batch once untimed
(warm-up) and then `runs` times, timed by the wall clock around the call, queries from host
memory to answers in host memory, as a user gets them:

- spillway-psb and spillway-brute: `SSTree.query(..., device="cuda")`, PSB with one warp per
  query, and the fused brute force (groups of 8 queries per warp over slices of the leaves, k
  best per warp, merged);
- spillway-cpu: `method="auto"` on every core of this machine, on the batch's first
  `cpu_queries` queries (one timed run: it is the reference for exactness, and its rate is
  queries over its time);
- torch-cdist: `torch.cdist` (its default: by matrix products at these sizes, TF32 off) and
  `topk`, in float32, the points resident on the GPU, queries in chunks so that a chunk's
  distance matrix stays under 4 GB (its direct mode, differences squared, ran at about 800
  queries/s at 10^6 points in a trial: too slow to time here);
- torch-mm: `|q|^2 - 2 q.p + |p|^2` by chunked `mm` (TF32 off) and `topk`, square roots taken.

Exactness: PSB's and brute force's answers must equal each other bit for bit on every batch and
the CPU's on its queries (else the script stops: the CPU's exactness against a float64 brute force
is the CPU tests' and the CPU page's); torch's float32 answers are reported by their recall of our
neighbours and their worst relative distance gap. Single-query latency: `latency` queries, each
its own call, median and 90th percentile, for PSB, brute force and torch-cdist. PSB reports nodes
visited per query and its warp efficiency (the kernel's own count of busy lanes per warp step).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import knn_peers  # noqa: E402  (the CPU page's data)

SIGMA = 40.0
CHUNK_BYTES = 4 << 30


def timed(call, runs):
    """`runs` wall-clock times of `call()` after one untimed call; the last answer."""
    answer = call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - started)
    return times, answer


def torch_contenders(torch, points):
    """torch-cdist and torch-mm on `points` (resident on the GPU): calls of (queries, k)."""
    device_points = torch.from_numpy(points).cuda()
    norms = (device_points * device_points).sum(1)
    chunk = max(1, CHUNK_BYTES // (4 * len(points)))

    def run(queries, k, distances_of):
        device_queries = torch.from_numpy(queries).cuda()
        found_d, found_i = [], []
        for first in range(0, len(queries), chunk):
            d = distances_of(device_queries[first:first + chunk])
            values, rows = torch.topk(d, k, dim=1, largest=False, sorted=True)
            found_d.append(values)
            found_i.append(rows)
        distances = torch.cat(found_d).cpu().numpy()
        indices = torch.cat(found_i).cpu().numpy()
        torch.cuda.synchronize()
        return distances, indices

    def cdist(queries, k):
        return run(queries, k, lambda q: torch.cdist(q, device_points))

    def mm(queries, k):
        return run(queries, k, lambda q: ((q * q).sum(1)[:, None] - 2.0 * (q @ device_points.T) + norms[None, :])
                   .clamp_min_(0).sqrt_())

    return {"torch-cdist": cdist, "torch-mm": mm}


def agreement(ours, theirs):
    """Recall of our neighbours in a peer's answer, and the worst relative distance gap by rank."""
    (our_d, our_i), (their_d, their_i) = ours, theirs
    hits = sum(len(np.intersect1d(a, b)) for a, b in zip(our_i, their_i))
    gap = np.max(np.abs(their_d.astype(np.float64) - our_d) / np.maximum(our_d, 1e-12))
    return hits / our_i.size, float(gap)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency", type=int, default=10)
    parser.add_argument("--cpu-queries", type=int, default=1000)
    parser.add_argument("--dims", default="2,4,8,16,32,64")
    parser.add_argument("--ks", default="1,10,32,100")
    parser.add_argument("--distributions", default="uniform,clustered")
    args = parser.parse_args(argv)
    import torch
    from spillway.knn import SSTree, gpu_unavailable

    if gpu_unavailable() is not None:
        raise SystemExit(f"no GPU: {gpu_unavailable()}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = []
    scratch = Path(tempfile.mkdtemp(prefix="knn-gpu-"))
    for distribution in args.distributions.split(","):
        for dims in [int(d) for d in args.dims.split(",")]:
            part = scratch / f"{distribution}-d{dims}"
            knn_peers.generate(part, distribution, SIGMA, dims, args.points, args.queries)
            points = np.load(part / "points.npy")
            queries = np.load(part / "queries.npy")
            tree = SSTree(points)
            build_s = tree.stats()["build_s"]
            tree.query(queries[:1], 1, device="cuda")
            peers = torch_contenders(torch, points)
            for k in [int(k) for k in args.ks.split(",")]:
                row = {"distribution": distribution, "dims": dims, "k": k, "points": args.points,
                       "queries": args.queries, "build_s": build_s, "contenders": {}}

                def ours(method, q=queries, k=k):
                    return tree.query(q, k, method=method, device="cuda", stats=True)

                answers = {}
                for method in ("psb", "brute"):
                    times, (d, i, stats) = timed(lambda: ours(method), args.runs)
                    answers[method] = (d, i)
                    row["contenders"][f"spillway-{method}"] = {
                        "times": times, "queries_per_s": args.queries / statistics.median(times),
                        "nodes_visited": stats["nodes_visited"] / args.queries,
                        "distances": stats["distances_computed"] / args.queries,
                        "warp_efficiency": stats["warp_efficiency"], "kernel_s": stats["kernel_s"],
                        "engine_s": stats["query_s"]}
                if not (np.array_equal(answers["psb"][0], answers["brute"][0])
                        and np.array_equal(answers["psb"][1], answers["brute"][1])):
                    raise SystemExit(f"OUTPUT DID NOT VALIDATE: psb and brute differ at {row}")
                cpu_q = queries[:args.cpu_queries]
                cpu_started = time.perf_counter()
                cpu = tree.query(cpu_q, k, method="auto", device="cpu")
                cpu_s = time.perf_counter() - cpu_started
                if not (np.array_equal(cpu[0], answers["psb"][0][:len(cpu_q)])
                        and np.array_equal(cpu[1], answers["psb"][1][:len(cpu_q)])):
                    raise SystemExit(f"OUTPUT DID NOT VALIDATE: GPU and CPU differ at {row}")
                row["contenders"]["spillway-cpu"] = {"times": [cpu_s], "queries_per_s": len(cpu_q) / cpu_s}
                for name, call in peers.items():
                    times, answer = timed(lambda: call(queries, k), args.runs)
                    recall, gap = agreement(answers["psb"], answer)
                    row["contenders"][name] = {"times": times, "queries_per_s": args.queries / statistics.median(times),
                                               "recall": recall, "worst_gap": gap}
                latency = {}
                for name, single in (("spillway-psb", lambda q: tree.query(q, k, method="psb", device="cuda")),
                                     ("spillway-brute", lambda q: tree.query(q, k, method="brute", device="cuda")),
                                     ("torch-cdist", lambda q: peers["torch-cdist"](q[None, :], k))):
                    single(queries[0])
                    seconds = []
                    for q in queries[1:1 + args.latency]:
                        at = time.perf_counter()
                        single(q)
                        seconds.append(time.perf_counter() - at)
                    latency[name] = {"median_ms": 1e3 * statistics.median(seconds),
                                     "p90_ms": 1e3 * float(np.percentile(seconds, 90))}
                row["latency"] = latency
                results.append(row)
                write(args, torch, started, results)
                print(json.dumps({"distribution": distribution, "dims": dims, "k": k,
                                  "psb_kernel_ms": round(row["contenders"]["spillway-psb"]["kernel_s"] * 1e3, 3),
                                  "psb_engine_ms": round(row["contenders"]["spillway-psb"]["engine_s"] * 1e3, 3),
                                  "brute_kernel_ms": round(row["contenders"]["spillway-brute"]["kernel_s"] * 1e3, 3),
                                  **{n: round(c["queries_per_s"]) for n, c in row["contenders"].items()},
                                  "latency_ms": {n: round(v["median_ms"], 3) for n, v in latency.items()},
                                  "elapsed_s": round(time.perf_counter() - started)}), flush=True)
            for name in ("points.npy", "queries.npy", "points.f32", "queries.f32"):
                (part / name).unlink(missing_ok=True)
    print(f"wrote {args.out / 'knn-gpu.md'} in {round(time.perf_counter() - started)} s")
    return 0


def write(args, torch, started, results):
    """The page and the JSON as they stand (after every variant: a run stopped early keeps its rows)."""
    machine = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "python": platform.python_version(),
               "cpus": os.cpu_count(), "seconds": round(time.perf_counter() - started)}
    report = {"harness": "bench/knn_gpu.py", "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "source": os.environ.get("SPILLWAY_SOURCE", ""), "machine": machine,
              "args": {k: str(v) for k, v in vars(args).items()}, "results": results}
    (args.out / "knn-gpu.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "knn-gpu.md").write_text(page(report))


def spread(times):
    return f"{min(times) * 1e3:.1f}-{max(times) * 1e3:.1f} ms"


def page(report):
    machine, results = report["machine"], report["results"]
    a = report["args"]
    lines = [
        "# knn-gpu: exact kNN on one GPU",
        "",
        f"One run of `python3 bench/knn_gpu.py --out DIR --points {a['points']} --queries {a['queries']} "
        f"--runs {a['runs']} --latency {a['latency']} --cpu-queries {a['cpu_queries']}` (by `scripts/gpu-check`), "
        f"on {machine['gpu']} with {machine['cpus']} CPU cores, torch {machine['torch']}, Python {machine['python']}; "
        f"{machine['seconds']} s" + (f", Spillway at commit {report['source']}" if report.get("source") else "")
        + ". What each contender is and how it is timed: the script's docstring.",
        "",
        "Queries per second: the median of the runs (batch of "
        f"{a['queries']} queries, answers back in host memory), the runs' spread in brackets. "
        "spillway-cpu: one run of the first "
        f"{a['cpu_queries']} queries on every core. Every Spillway answer was checked equal bit for bit "
        "(PSB = brute force on the whole batch, = the CPU on its queries); torch's recall is of our "
        "neighbours, its gap the worst relative distance difference (float32 arithmetic). "
        "Nodes visited: internal nodes whose children PSB evaluated, per query; warp efficiency: the "
        "share of busy lanes in its warps' steps; psb kernel: the last run's time in the kernel (the "
        "rest of its time is copies, allocation and the call).",
        "",
        "| data | d | k | spillway-psb | spillway-brute | psb / brute | torch-cdist | torch-mm | psb / best torch "
        "| spillway-cpu | nodes visited | warp eff. | psb kernel | torch recall |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results:
        c = row["contenders"]
        psb, brute = c["spillway-psb"], c["spillway-brute"]
        best_torch = max(c["torch-cdist"]["queries_per_s"], c["torch-mm"]["queries_per_s"])
        lines.append(
            f"| {row['distribution']} | {row['dims']} | {row['k']} "
            f"| {psb['queries_per_s']:,.0f} ({spread(psb['times'])}) "
            f"| {brute['queries_per_s']:,.0f} ({spread(brute['times'])}) "
            f"| {psb['queries_per_s'] / brute['queries_per_s']:.2f} "
            f"| {c['torch-cdist']['queries_per_s']:,.0f} ({spread(c['torch-cdist']['times'])}) "
            f"| {c['torch-mm']['queries_per_s']:,.0f} ({spread(c['torch-mm']['times'])}) "
            f"| {psb['queries_per_s'] / best_torch:.2f} "
            f"| {c['spillway-cpu']['queries_per_s']:,.0f} "
            f"| {psb['nodes_visited']:.1f} | {psb['warp_efficiency']:.2f} | {psb['kernel_s'] * 1e3:.2f} ms "
            f"| {min(c['torch-cdist']['recall'], c['torch-mm']['recall']):.4f} |")
    lines += ["", "## Single-query latency", "",
              f"Each of {a['latency']} queries its own call; median and 90th percentile, ms.", "",
              "| data | d | k | spillway-psb | spillway-brute | torch-cdist |", "|---|---|---|---|---|---|"]
    for row in results:
        lat = row["latency"]
        cells = " | ".join(f"{lat[n]['median_ms']:.3f} / {lat[n]['p90_ms']:.3f}"
                           for n in ("spillway-psb", "spillway-brute", "torch-cdist"))
        lines.append(f"| {row['distribution']} | {row['dims']} | {row['k']} | {cells} |")
    lines += ["", "## Targets", ""]
    lines += targets(results)
    return "\n".join(lines) + "\n"


def targets(results):
    def rate(row, name):
        return row["contenders"][name]["queries_per_s"]

    out = []
    for row in results:
        psb, brute = rate(row, "spillway-psb"), rate(row, "spillway-brute")
        d, k, data = row["dims"], row["k"], row["distribution"]
        if d <= 4 and k == 10:
            kernel_s = row["contenders"]["spillway-psb"].get("kernel_s")
            kernel = f", its kernel alone {row['queries'] / kernel_s:,.0f}" if kernel_s else ""
            out.append(f"- {data}, d = {d}, k = 10: PSB {psb:,.0f} queries/s{kernel} "
                       f"(target 10^7: {'met' if psb >= 1e7 else 'not met'}), {psb / brute:.1f}x our brute force "
                       f"(target 10x: {'met' if psb >= 10 * brute else 'not met'})")
        if d == 16 and data == "clustered":
            out.append(f"- clustered, d = 16, k = {k}: PSB {psb / brute:.1f}x brute force (target 3x: "
                       f"{'met' if psb >= 3 * brute else 'not met'})")
        if d == 64 and data == "clustered":
            out.append(f"- clustered, d = 64, k = {k}: PSB {psb / brute:.1f}x brute force (target 2x: "
                       f"{'met' if psb >= 2 * brute else 'not met'})")
    return out


if __name__ == "__main__":
    sys.exit(main())
