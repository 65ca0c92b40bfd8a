"""The build's schedule: longest chapters first, ``after`` respected, and one pool of job slots
(scaletax.jobserver) shared by the chapters and the precision experiment's workers."""
import json
import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from scaletax import jobserver
from scaletax.report import chapters as toc
from scaletax.report import execute
from scaletax.report.chapters import Chapter
from test_cache import NOTEBOOK as TINY_NOTEBOOK, Scen, TinyChapter


def _ch(slug, cold, after=()):
    return Chapter(slug, reads=(), data=(), cold_seconds=cold, after=after)


def test_schedule_starts_the_longest_first_recorded_seconds_before_the_static_estimate():
    chs = [_ch("a", 5), _ch("b", 30), _ch("c", 5), _ch("d", 12)]
    assert [c.slug for c in execute.schedule(chs)] == ["b", "d", "a", "c"]  # ties in book order
    assert [c.slug for c in execute.schedule(chs, {"a": 40.0, "b": 1.0})] == ["a", "d", "c", "b"]


def test_schedule_counts_the_chapters_that_wait_for_one_in_its_length():
    chs = [_ch("a", 5), _ch("b", 12), _ch("c", 10, after=("a",)), _ch("d", 8)]
    # a's path is 5 + 10: it starts before b (12) although it is shorter
    assert [c.slug for c in execute.schedule(chs)] == ["a", "b", "c", "d"]
    assert [c.slug for c in execute.schedule(chs, {"c": 1.0})] == ["b", "d", "a", "c"]
    cyc = [_ch("a", 5, after=("b",)), _ch("b", 3, after=("a",))]
    assert [c.slug for c in execute.schedule(cyc)] == ["a", "b"]  # a cycle: still an order


def test_the_default_book_starts_the_precision_chapter_first():
    order = [c.slug for c in execute.schedule(list(toc.CHAPTERS))]
    assert order[0] == "precision"
    assert all(a in {c.slug for c in toc.CHAPTERS} for c in toc.CHAPTERS for a in c.after)


def test_recorded_seconds_round_trip_and_ignore_a_bad_record(tmp_path):
    assert execute.recorded_seconds(tmp_path) == {}
    execute._record_seconds(tmp_path, "memory", 10.714)
    execute._record_seconds(tmp_path, "precision", 63.0)
    assert execute.recorded_seconds(tmp_path) == {"memory": 10.71, "precision": 63.0}
    (tmp_path / execute.SECONDS_FILE).write_text(json.dumps({"memory": "slow", "x": -1, "y": 2}))
    assert execute.recorded_seconds(tmp_path) == {"y": 2.0}
    (tmp_path / execute.SECONDS_FILE).write_text("{not json")
    assert execute.recorded_seconds(tmp_path) == {}


def _busy(path, counter, peak, lock):
    import os

    os.environ[jobserver.ENV] = path
    with jobserver.slot():
        with lock:
            counter.value += 1
            peak.value = max(peak.value, counter.value)
        time.sleep(0.15)
        with lock:
            counter.value -= 1


def test_processes_never_hold_more_slots_than_the_server_has(tmp_path):
    server = jobserver.Server(tmp_path / "slots", 2)
    ctx = multiprocessing.get_context("spawn")
    counter, peak, lock = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Lock()
    procs = [ctx.Process(target=_busy, args=(str(server.path), counter, peak, lock)) for _ in range(5)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        assert [p.exitcode for p in procs] == [0] * 5
        assert peak.value == 2
        assert server.take() and server.take() and not server.take()  # every slot came back
    finally:
        server.close()
    assert not server.path.exists()


def _worker():
    """A thread that takes a slot (from ``SCALETAX_JOBSERVER``) and sets its event once it has one."""
    got = threading.Event()

    def run():
        with jobserver.slot():
            got.set()

    t = threading.Thread(target=run)
    t.start()
    return t, got


def test_a_slot_waits_for_a_free_one_and_lend_gives_the_callers_back(tmp_path, monkeypatch):
    server = jobserver.Server(tmp_path / "slots", 1)
    monkeypatch.setenv(jobserver.ENV, str(server.path))
    assert server.take()  # the runner's: this "chapter" holds the only slot
    t, got = _worker()
    assert not got.wait(0.3)  # no slot free: it waits
    with jobserver.lend():  # the chapter waits on its worker: its slot goes to it
        assert got.wait(5)
        t.join(5)
    assert not server.take()  # lend took the chapter's slot back
    server.give()
    server.close()


def test_a_worker_lets_the_runner_take_a_free_slot_first(tmp_path, monkeypatch):
    server = jobserver.Server(tmp_path / "slots", 1)
    monkeypatch.setenv(jobserver.ENV, str(server.path))
    server.want(True)  # a chapter is ready to start: the runner goes first
    t, got = _worker()
    assert not got.wait(0.3)  # a slot is free, yet the worker waits
    assert server.take()  # the runner's chapter
    server.want(False)
    assert not got.wait(0.3)  # no slot free now
    server.give()  # the chapter ended
    assert got.wait(5)
    t.join(5)
    server.close()
    assert not list(tmp_path.iterdir())


def test_a_worker_waiting_for_a_slot_stops_once_the_build_is_gone(tmp_path, monkeypatch):
    server = jobserver.Server(tmp_path / "slots", 1)
    monkeypatch.setenv(jobserver.ENV, str(server.path))
    assert server.take()
    errors = []

    def run():
        try:
            with jobserver.slot():
                pass
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.2)
    server.close()  # the runner ended (or was interrupted): the pipe is removed
    t.join(5)
    assert not t.is_alive() and errors and "job slots" in errors[0] and "are gone" in errors[0]


def test_without_a_jobserver_slot_and_lend_do_nothing(monkeypatch):
    monkeypatch.delenv(jobserver.ENV, raising=False)
    with jobserver.slot(), jobserver.lend():
        pass
    with pytest.raises(ValueError, match="at least one slot"):
        jobserver.Server(Path("/nonexistent/slots"), 0)


NOTEBOOK = TINY_NOTEBOOK.split("# Tiny")[0].replace("{", "{{").replace("}", "}}") + """```{{code-cell}} ipython3
:tags: [parameters]
value = 1
```

```{{code-cell}} ipython3
import os, time
with open(os.environ["TEST_ORDER_LOG"], "a") as f:
    f.write("start {name}\\n")
time.sleep(0.5)
with open(os.environ["TEST_ORDER_LOG"], "a") as f:
    f.write("end {name}\\n")
```
"""


@pytest.mark.kernels
def test_chapters_start_longest_first_and_after_the_chapters_they_reuse(tmp_path, monkeypatch):
    log = tmp_path / "order.log"
    monkeypatch.setenv("TEST_ORDER_LOG", str(log))

    def chapter(name, cold, after=()):
        src = tmp_path / f"{name}.md"
        src.write_text(NOTEBOOK.format(name=name))
        return TinyChapter(name, reads=("value",), data=(), path=str(src), cold_seconds=cold, after=after)

    # book order short, long, reuser; "reuser" is estimated longest but waits for "long"
    chs = [chapter("short", 1), chapter("long", 5), chapter("reuser", 9, after=("long",))]
    cache = tmp_path / "cache"
    notes = []
    res = execute.execute_chapters(chs, Scen(), cache, tmp_path / "logs", jobs=2,
                                   progress=lambda slug, msg: notes.append((slug, msg.split()[0])))
    assert [r.slug for r in res] == ["short", "long", "reuser"]  # book order, whatever ran first
    started = [slug for slug, what in notes if what == "executing"]
    assert started == ["long", "short", "reuser"]  # the runner's order (the kernels' may differ)
    assert notes.index(("reuser", "executing")) > notes.index(("long", "executed"))
    lines = log.read_text().splitlines()
    assert lines.index("start reuser") > lines.index("end long")
    assert set(execute.recorded_seconds(cache)) == {"short", "long", "reuser"}
    assert not list(cache.glob(".tmp-jobs-*"))  # the slots' pipe is gone with the build


# --- jobserver.map: a chapter's independent numpy work on the build's free slots ---------------

def _recorder(delay=0.0, fail=()):
    seen, lock, running = [], threading.Lock(), [0, 0]  # (thread, item); [now, most at once]

    def fn(x):
        with lock:
            seen.append((threading.get_ident(), x))
            running[0] += 1
            running[1] = max(running)
        try:
            time.sleep(delay)
            if x in fail:
                raise ValueError(f"item {x}")
            return x * x
        finally:
            with lock:
                running[0] -= 1
    return fn, seen, running


def test_map_without_a_jobserver_is_the_plain_loop_in_the_callers_thread(monkeypatch):
    monkeypatch.delenv(jobserver.ENV, raising=False)
    monkeypatch.setenv(jobserver.WORKERS_ENV, "2")
    fn, seen, _ = _recorder()
    assert jobserver.map(fn, range(5)) == [0, 1, 4, 9, 16]
    assert seen == [(threading.get_ident(), x) for x in range(5)]


def test_map_runs_items_in_a_helper_holding_a_free_slot_and_gives_it_back(free_slot):
    fn, seen, running = _recorder(delay=0.1)
    assert jobserver.map(fn, range(8)) == [x * x for x in range(8)]
    assert len({t for t, _ in seen}) == 2 and running[1] == 2  # the caller and one helper, side by side


def test_map_takes_no_slot_another_chapter_holds_and_its_helper_gives_up_when_the_work_ends(free_slot):
    assert free_slot.take()  # another chapter's: none free
    fn, seen, running = _recorder(delay=0.05)
    out = []
    t = threading.Thread(target=lambda: out.append(jobserver.map(fn, range(4))))
    t.start()
    t.join(10)
    assert not t.is_alive() and out == [[0, 1, 4, 9]]
    assert {th for th, _ in seen} == {t.ident} and running[1] == 1  # the caller alone
    assert not free_slot.take()  # no slot was taken or added
    free_slot.give()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_map_raises_the_error_of_the_first_failing_item_as_the_loop_would(free_slot, monkeypatch, jobs):
    monkeypatch.setenv(jobserver.WORKERS_ENV, jobs)
    fn, _, _ = _recorder(delay=0.02, fail={3, 5})
    with pytest.raises(ValueError, match="^item 3$"):
        jobserver.map(fn, range(8))


def test_a_map_helper_waits_without_spinning_while_the_runner_wants_the_free_slot(free_slot):
    free_slot.want(True)  # a chapter is ready to start: the helper must leave the free slot to the runner
    fn, seen, _ = _recorder(delay=0.25)
    cpu = time.process_time()
    assert jobserver.map(fn, range(3)) == [0, 1, 4]
    assert len({t for t, _ in seen}) == 1  # the caller alone
    assert time.process_time() - cpu < 0.3  # 0.75 s of sleeping items: the helper slept too, never spun
    free_slot.want(False)
