"""scaletax benchmarks: book build, layout search, quantizers, and how cost scales with work.

    make bench                      # everything (~15-25 min on 2 cores)
    .venv/bin/python benchmarks/run.py --only quantizers search --repeats 5

Times are medians of ``--repeats`` runs; every comparison is a ratio of two things measured
in the same run, because the machine is small and noisy. Results go to
``benchmarks/results/latest.json`` and a table is printed. Nothing here asserts a speed: the
targets are reported as met or not.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "lib"))

TARGETS = {
    "warm_rebuild_speedup": 10.0,          # cold / warm
    "search_layouts_per_s": 1e6,            # vectorized, one core
    "search_speedup_vs_loop": 100.0,
    "nvfp4_elements_per_s": 50e6,
}
#: Calculon's published search rate on this class of machine (Isaev et al. SC23), as quoted in
#: the benchmark issue: about 22 configurations per second per core.
CALCULON_LAYOUTS_PER_S = 22.0


def _cpu_and_wall(fn, repeats: int) -> tuple[dict, object]:
    """Median CPU time (this process, all threads) and wall time of ``fn()`` over ``repeats`` runs."""
    cpu, wall, out = [], [], None
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return {"cpu_s": statistics.median(cpu), "wall_s": statistics.median(wall), "rounds": repeats}, out


def median_time(fn, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


# ------------------------------------------------------------------------------------------
# Book build
# ------------------------------------------------------------------------------------------
def _cli(args, build_dir: Path, env_extra=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, SCALETAX_BUILD_DIR=str(build_dir))
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-m", "scaletax.report.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"scaletax {' '.join(args)} failed: {proc.stderr[-1500:]}")
    return proc


def _manifest(build_dir: Path, name: str) -> dict:
    return json.loads((build_dir / name / "manifest.json").read_text())


def _one_chapter_key(manifest: dict) -> tuple[str, str, object]:
    """A scenario key read by exactly one chapter (the cheapest such chapter), and a new value."""
    from scaletax.report import chapters

    seconds = {n["chapter"]: n["seconds"] for n in manifest["notebooks"]}
    readers: dict[str, list[str]] = {}
    for ch in chapters.CHAPTERS:
        for key in ch.reads:
            readers.setdefault(key, []).append(ch.slug)
    single = [(seconds.get(v[0], 0.0), k, v[0]) for k, v in readers.items() if len(v) == 1]
    if not single:
        raise RuntimeError("no scenario key is read by exactly one chapter")
    _, key, slug = min(single)
    value = manifest["scenario"]
    for part in key.split("."):
        value = value[part]
    return key, slug, value


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.01
    if isinstance(value, list) and value:
        return value[:-1] if len(value) > 1 else value
    if isinstance(value, str):
        return value + " (changed by the benchmark)"
    raise RuntimeError(f"do not know how to change {value!r}")


def bench_book(repeats: int) -> dict:
    cold, warm, one = [], [], []
    key = slug = None
    executed_after_change: list[str] = []
    for _ in range(repeats):
        build_dir = Path(tempfile.mkdtemp(prefix="scaletax-bench-"))
        try:
            t0 = time.perf_counter()
            _cli(["build", "--name", "bench"], build_dir)
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _cli(["build", "--name", "bench"], build_dir)
            warm.append(time.perf_counter() - t0)
            m = _manifest(build_dir, "bench")
            key, slug, value = _one_chapter_key(m)
            new = _changed(value)
            t0 = time.perf_counter()
            _cli(["build", "--name", "bench", "--set", f"{key}={json.dumps(new)}"], build_dir)
            one.append(time.perf_counter() - t0)
            m2 = _manifest(build_dir, "bench")
            executed_after_change = [n["chapter"] for n in m2["notebooks"] if n["status"] == "executed"]
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
    base = bench_book_baseline(repeats)
    cold_html = base.pop("ours_cold_html_s")
    out = {
        "cold_s": statistics.median(cold), "warm_s": statistics.median(warm),
        "one_param_s": statistics.median(one), "one_param_key": key, "one_param_chapter": slug,
        "one_param_executed": executed_after_change,
        "cold_html_only_s": cold_html, **base,
    }
    out["warm_speedup"] = out["cold_s"] / out["warm_s"]
    out["one_param_speedup"] = out["cold_s"] / out["one_param_s"]
    out["vs_jupyter_book_execute"] = out["jb_force_serial_html_s"] / out["cold_html_only_s"]
    return out


def bench_book_baseline(repeats: int) -> dict:
    """Jupyter Book executing the same notebooks itself (execute_notebooks: force, serial)."""
    from scaletax.report import book, chapters
    from scaletax.report.execute import execute_chapters
    from scaletax.report.scenario import resolve

    ours, theirs = [], []
    for _ in range(repeats):
        build_dir = Path(tempfile.mkdtemp(prefix="scaletax-bench-"))
        try:
            t0 = time.perf_counter()
            _cli(["build", "--name", "bench", "--no-pdf"], build_dir)
            ours.append(time.perf_counter() - t0)
            scen = resolve()
            results = execute_chapters(list(chapters.CHAPTERS), scen, build_dir / ".cache", build_dir / "logs")
            src = build_dir / "jb" / "src"
            info = book.page_info("bench", scen, chapters.ROOT / "data/scenarios/default.yaml", (),
                                  "bench", "bench")
            book.stage_sources(src, results, info)
            for res in results:  # hand Jupyter Book the unexecuted sources instead
                (src / f"{res.slug}.ipynb").unlink()
                shutil.copyfile(chapters.NOTEBOOK_DIR / f"{res.slug}.md", src / f"{res.slug}.md")
            conf = (src / "conf.py").read_text()
            conf = conf.replace("nb_execution_mode = 'off'", "nb_execution_mode = 'force'")
            conf += "nb_execution_timeout = 1800\nnb_execution_raise_on_error = True\n"
            (src / "conf.py").write_text(conf)
            env = dict(os.environ, SCALETAX_FIGURES_DIR=str(build_dir / "jb" / "figures"))
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src),
                                   str(build_dir / "jb" / "html")], cwd=src, env=env,
                                  capture_output=True, text=True)
            theirs.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                raise RuntimeError(f"baseline Jupyter Book build failed: {proc.stderr[-1500:]}")
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
    return {"ours_cold_html_s": statistics.median(ours), "jb_force_serial_html_s": statistics.median(theirs)}


# ------------------------------------------------------------------------------------------
# Quantizers
# ------------------------------------------------------------------------------------------
def bench_quantizers(repeats: int, n: int = 16 * 2**20) -> dict:
    import ml_dtypes

    from scaletax import precision

    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32).reshape(-1, 4096)
    floor_dtype = {"bf16": ml_dtypes.bfloat16, "fp8": ml_dtypes.float8_e4m3fn, "fp6": ml_dtypes.float6_e3m2fn,
                   "fp4": ml_dtypes.float4_e2m1fn}
    rows = {}
    for fmt in precision.FORMATS:
        t, _ = median_time(lambda: precision.quantize(x, fmt), repeats)
        rows[fmt] = {"elements_per_s": n / t, "seconds": t}
    for name, dt in floor_dtype.items():
        t, _ = median_time(lambda: x.astype(dt).astype(np.float32), repeats)
        rows[f"ml_dtypes_astype_{name}"] = {"elements_per_s": n / t, "seconds": t}
    floor = rows["ml_dtypes_astype_fp4"]["elements_per_s"]
    for fmt in precision.FORMATS:
        rows[fmt]["vs_astype_fp4_floor"] = rows[fmt]["elements_per_s"] / floor
    return {"elements": n, "formats": rows}


def bench_search(repeats: int) -> dict:
    """Vectorized search vs the plain per-layout loop of the same model, and scaling with layouts."""
    from scaletax import memory, models, perf, search
    from scaletax.layout import label

    tokens = 16 * 2**20
    dense = models.get("megatron_1t")
    moe = models.get("kimi_k2")
    # 1) the same space both ways, to the end: do they pick the same layout?
    vec, _ = median_time(lambda: search.search(dense, "fp8", "h100_sxm", 16384, tokens_per_step=tokens, pareto=False),
                         repeats)
    res = search.search(dense, "fp8", "h100_sxm", 16384, tokens_per_step=tokens, pareto=False)
    loop = search.search_loop(dense, "fp8", "h100_sxm", 16384, tokens_per_step=tokens)
    same = loop["best"] is not None and label(loop["best"]) == label(res.best)
    # 2) the large MoE space: vectorized in full, the loop on a sample of it
    big = search.benchmark(moe, "fp8", "gb200", 16384, tokens_per_step=tokens, repeats=repeats, loop_layouts=500)
    # 3) time vs number of layouts: the vectorized evaluation on 10^3 .. 10^6 layouts
    la = search.candidates(moe, 16384, search.SearchSpace(), search.target_sequences(moe, tokens, None))
    reps = int(np.ceil(1e6 / len(la)))
    big_la = search._concat([la] * reps)
    sizes, secs = [], []
    for n in (1_000, 10_000, 100_000, 1_000_000):
        sub = big_la[np.arange(n)]

        def run(sub=sub):
            memory.breakdown(moe, sub, "fp8")
            perf.evaluate(perf.prepare(moe, sub, "fp8", "gb200", ep_dispatch="dedup"))

        t, _ = median_time(run, max(1, repeats if n < 1_000_000 else 1))
        sizes.append(n)
        secs.append(t)
    slope = float(np.polyfit(np.log10(sizes), np.log10(secs), 1)[0])
    return {
        "space": "megatron_1t, fp8, 16,384 H100, 16M tokens per step",
        "n_layouts": res.n_layouts, "vectorized_seconds": vec,
        "vectorized_layouts_per_s": res.n_layouts / vec,
        "loop_seconds": loop["seconds"], "loop_layouts_per_s": loop["n_layouts"] / loop["seconds"],
        "speedup": (res.n_layouts / vec) / (loop["n_layouts"] / loop["seconds"]),
        "best_vectorized": label(res.best),
        "best_loop": label(loop["best"]) if loop["best"] is not None else None,
        "same_best": same,
        "moe_space": big,
        "scaling": {"layouts": sizes, "seconds": secs, "slope": slope,
                    "layouts_per_s_at_1e6": sizes[-1] / secs[-1]},
        "calculon_layouts_per_s_per_core": CALCULON_LAYOUTS_PER_S,
    }


def _random_layouts(n: int, seed: int = 0):
    """n random layouts over the axes the memory and communication models read."""
    from scaletax.layout import LayoutArray

    rng = np.random.default_rng(seed)
    tp = 2 ** rng.integers(0, 4, n)
    dp, pp = 2 ** rng.integers(0, 6, n), 2 ** rng.integers(0, 5, n)
    return LayoutArray.from_arrays(tp=tp, pp=pp, cp=rng.integers(1, 3, n), dp=dp, ep=2 ** rng.integers(0, 6, n),
                                   etp=np.where(rng.random(n) < 0.5, 1, tp), vp=rng.integers(1, 3, n),
                                   mbs=rng.integers(1, 4, n), gbs=dp * pp * 4, sp=rng.integers(0, 2, n),
                                   zero_stage=rng.integers(0, 4, n), recompute=rng.integers(0, 3, n))


def bench_kernels(repeats: int) -> dict:
    """The vectorized model kernels on many layouts (moved here from wall-clock asserts in tests):
    memory.breakdown on 10^6 layouts, comm.step_traffic + exposed_comm on 10^5, and the
    communication chapter's tax sweep (2 models x 3 GPUs x 3 cluster sizes)."""
    from scaletax import comm, memory, models
    from scaletax.chapters import communication as cs
    from scaletax.topology import Topology

    moe, dense = models.get(models.MOE_1T), models.get("llama31_405b")
    la6 = _random_layouts(1_000_000)
    la5 = _random_layouts(100_000, seed=2).replace(ep=1, etp=1)
    topo = Topology.from_gpu("h100_sxm")
    mem, _ = _cpu_and_wall(lambda: memory.breakdown(moe, la6, "mxfp8"), repeats)
    step, _ = _cpu_and_wall(lambda: comm.exposed_comm(comm.step_traffic(dense, la5, topo), 30.0), repeats)
    sweep, _ = _cpu_and_wall(lambda: cs.tax_rows(["megatron_1t", "kimi_k2"], ["h100_sxm", "b200", "gb200"],
                                                 [1024, 16384, 100000], batch_tokens=16 * 2**20), repeats)
    return {"memory_breakdown_1e6": {**mem, "layouts_per_s": 1e6 / mem["cpu_s"]},
            "comm_step_traffic_1e5": {**step, "layouts_per_s": 1e5 / step["cpu_s"]},
            "communication_tax_sweep": sweep}


def bench_chapters_scaling(repeats: int) -> dict:
    """Cold build time (HTML) with the first k chapters, k = 1..n: is it linear in k?"""
    from scaletax.report import book, chapters
    from scaletax.report.scenario import DEFAULT_SCENARIO, resolve

    all_chapters, all_toc, root = chapters.CHAPTERS, chapters.TOC, chapters.ROOT_PAGE
    # the root page (the summary) links into every chapter, so it comes last; until then the
    # hand-written intro page is the root
    order = [c for c in all_chapters if c.slug != root] + [c for c in all_chapters if c.slug == root]
    scen = resolve()
    ks, secs = [], []
    try:
        for k in range(1, len(order) + 1):
            chapters.CHAPTERS = tuple(order[:k])
            chapters.ROOT_PAGE = root if k == len(order) else "intro"
            chapters.TOC = tuple(chapters.Part(p.caption, tuple(e for e in p.entries
                                                                if not isinstance(e, chapters.Chapter)
                                                                or e in chapters.CHAPTERS))
                                 for p in all_toc)
            times = []
            for _ in range(repeats):
                build_dir = Path(tempfile.mkdtemp(prefix="scaletax-bench-"))
                try:
                    t0 = time.perf_counter()
                    book.build(book.BuildOptions(name="k", scenario=scen, scenario_path=DEFAULT_SCENARIO,
                                                 overrides=(), jobs=1, pdf=False, build_root=build_dir))
                    times.append(time.perf_counter() - t0)
                finally:
                    shutil.rmtree(build_dir, ignore_errors=True)
            ks.append(k)
            secs.append(statistics.median(times))
    finally:
        chapters.CHAPTERS, chapters.TOC, chapters.ROOT_PAGE = all_chapters, all_toc, root
    slope, intercept = np.polyfit(ks, secs, 1) if len(ks) > 1 else (secs[0], 0.0)
    pred = np.polyval([slope, intercept], ks)
    ss_res = float(np.sum((np.array(secs) - pred) ** 2))
    ss_tot = float(np.sum((np.array(secs) - np.mean(secs)) ** 2)) or 1.0
    return {"chapters": ks, "seconds": secs, "slope_s_per_chapter": float(slope),
            "intercept_s": float(intercept), "r2": 1 - ss_res / ss_tot,
            "note": "jobs=1 so that chapter time adds up; chapters differ in cost, so R^2 tells how "
                    "close to linear the total is, not whether each chapter costs the same"}


# ------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------
def _table(results: dict) -> str:
    lines = ["| measurement | value | target |", "|---|---|---|"]
    b = results.get("book")
    if b:
        lines += [
            f"| cold build, HTML + PDF | {b['cold_s']:.0f} s | |",
            f"| warm rebuild (nothing changed) | {b['warm_s']:.1f} s ({b['warm_speedup']:.0f}x faster) | >= 10x |",
            f"| rebuild after `{b['one_param_key']}` | {b['one_param_s']:.0f} s, re-executed {', '.join(b['one_param_executed']) or 'none'} | only {b['one_param_chapter']} |",
            f"| cold HTML, scaletax (parallel, cached) | {b['cold_html_only_s']:.0f} s | |",
            f"| cold HTML, Jupyter Book execute force (serial) | {b['jb_force_serial_html_s']:.0f} s ({b['vs_jupyter_book_execute']:.2f}x ours) | |",
        ]
    s = results.get("search")
    if s:
        lines += [
            f"| layout search, vectorized | {s['vectorized_layouts_per_s']:,.0f} layouts/s | >= 1e6 |",
            f"| layout search, per-layout loop | {s['loop_layouts_per_s']:,.0f} layouts/s ({s['speedup']:,.0f}x slower) | >= 100x |",
            f"| Calculon (published, per core) | {CALCULON_LAYOUTS_PER_S:.0f} layouts/s ({s['vectorized_layouts_per_s'] / CALCULON_LAYOUTS_PER_S:,.0f}x slower) | |",
            f"| same best layout (vectorized vs loop) | {s['same_best']} | yes |",
        ]
        if "scaling" in s:
            sc = s["scaling"]
            lines.append(f"| search time vs layouts (10^3..10^6) | log-log slope {sc['slope']:.2f} ({'linear' if 0.8 <= sc['slope'] <= 1.2 else 'not linear'}) | |")
    q = results.get("quantizers")
    if q:
        for fmt in ("fp8_e4m3", "mxfp8_e4m3", "mxfp4", "nvfp4"):
            r = q["formats"][fmt]
            lines.append(f"| quantize {fmt}, 16M elements | {r['elements_per_s'] / 1e6:,.0f} M/s ({r['vs_astype_fp4_floor']:.2f}x astype) | {'>= 50 M/s' if fmt == 'nvfp4' else ''} |")
        r = q["formats"]["ml_dtypes_astype_fp4"]
        lines.append(f"| ml_dtypes astype fp4 round trip (floor) | {r['elements_per_s'] / 1e6:,.0f} M/s | |")
    c = results.get("chapters_scaling")
    if c:
        lines.append(f"| build time vs chapters (1..{c['chapters'][-1]}) | slope {c['slope_s_per_chapter']:.1f} s/chapter, R^2 {c['r2']:.2f} | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=["book", "search", "quantizers", "kernels", "chapters_scaling"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--book-repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    args = ap.parse_args(argv)
    results: dict = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                 "platform": platform.platform()},
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    runners = {"quantizers": lambda: bench_quantizers(args.repeats),
               "search": lambda: bench_search(args.repeats),
               "book": lambda: bench_book(args.book_repeats),
               "chapters_scaling": lambda: bench_chapters_scaling(1),
               "kernels": lambda: bench_kernels(args.repeats)}
    if args.out.exists():  # keep the parts not rerun now (each part carries its own date)
        previous = json.loads(args.out.read_text())
        results = {**{k: v for k, v in previous.items() if k in runners}, **results}
    results["targets"] = TARGETS
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results[name] = {**runners[name](), "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        args.out.write_text(json.dumps(results, indent=2, default=float) + "\n")  # after every part
    print(_table(results))
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
