"""The record of catalog reads: what a chapter's cache key holds of data/hardware.csv."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import edit_gpu_row
from scaletax import memo
from scaletax.inputs import hardware, models, runs
from scaletax.model import search


@pytest.fixture
def fresh(monkeypatch):
    """An empty record, no record file, no scenario GPUs (restored after)."""
    monkeypatch.delenv(hardware.READS_ENV, raising=False)
    saved = dict(hardware._READS)
    hardware.forget_reads()
    hardware.unregister()
    yield
    hardware.forget_reads()
    hardware._READS.update(saved)
    hardware.unregister()


def test_get_records_the_one_id_it_looks_up(fresh):
    hardware.get("b300")
    hardware.get("h100_sxm")
    hardware.get("b300")
    assert hardware.reads() == ("b300", "h100_sxm")


def test_the_whole_catalog_records_all(fresh):
    hardware.catalog()
    assert hardware.reads() == (hardware.ALL,)
    hardware.forget_reads()
    hardware.ids()
    assert hardware.reads() == (hardware.ALL,)


def test_an_unknown_id_is_recorded_as_read_and_the_error_lists_the_ids(fresh):
    with pytest.raises(hardware.UnknownHardware, match=r"unknown GPU id 'b301' \(did you mean 'b300'\?\); valid ids: a100"):
        hardware.get("b301")
    assert hardware.reads() == ("b301",)  # its absence is what was read, not the whole catalog
    assert not hardware.known("nope") and hardware.known("gb300")
    assert hardware.reads() == ("b301", "nope", "gb300")


def test_a_scenario_gpu_is_not_a_catalog_read_but_its_base_is(fresh):
    mine = hardware.define({"id": "gb200_800g", "base": "gb200", "nic_gbit_s": 800})
    assert hardware.reads() == ("gb200",)
    hardware.forget_reads()
    hardware.register({"gb200_800g": mine})
    assert hardware.get("gb200_800g") is mine and hardware.reads() == ()


def test_the_record_file_gets_each_new_id_once(fresh, tmp_path, monkeypatch):
    path = tmp_path / "reads.txt"
    monkeypatch.setenv(hardware.READS_ENV, str(path))
    for gid in ("gb200", "h100_sxm", "gb200", "h100_sxm"):
        hardware.get(gid)
    assert path.read_text() == "gb200\nh100_sxm\n"
    assert hardware.read_file(path) == ("gb200", "h100_sxm")
    hardware.catalog()
    assert hardware.read_file(path) == (hardware.ALL,)
    assert hardware.read_file(tmp_path / "none.txt") == ()


def test_child_processes_append_to_the_same_record(fresh, tmp_path, monkeypatch):
    path = tmp_path / "reads.txt"
    monkeypatch.setenv(hardware.READS_ENV, str(path))
    hardware.get("h100_sxm")
    # a process the kernel starts, and in it the precision chapter's kind of worker pool
    code = textwrap.dedent("""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from scaletax.inputs import hardware
        hardware.get('b300'); hardware.get('h100_sxm')
        if __name__ == '__main__':
            with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context('forkserver')) as pool:
                assert [g.id for g in pool.map(hardware.get, ['rubin', 'gb300'])] == ['rubin', 'gb300']
    """)
    script = tmp_path / "child.py"
    script.write_text(code)
    subprocess.run([sys.executable, str(script)], check=True, env=dict(os.environ), cwd=tmp_path)
    assert hardware.read_file(path) == ("b300", "gb300", "h100_sxm", "rubin")
    assert path.read_text().splitlines()[0] == "h100_sxm"


def test_runs_table_validation_reads_only_the_rows_gpus(fresh):
    rows = runs.read_runs(runs.RUNS_CSV)
    assert hardware.ALL not in hardware.reads()
    assert set(hardware.reads()) == {r["hardware"] for r in rows}


def test_a_runs_row_with_an_unknown_gpu_lists_the_valid_ids(tmp_path):
    src = runs.RUNS_CSV.read_text(encoding="utf-8").splitlines()
    header, first = src[0], src[1]
    col = header.split(",").index("hardware")
    import csv
    import io

    cells = next(csv.reader([first]))
    cells[col] = "h101_sxm"
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([next(csv.reader([header])), cells])
    path = tmp_path / "runs.csv"
    path.write_text(out.getvalue())
    with pytest.raises(runs.RunsTableError, match=r"column 'hardware': unknown hardware id 'h101_sxm'; "
                                                 r"valid ids: a100_sxm_80gb, h100_sxm, "):
        runs.read_runs(path)


def _reads_a_row(gpu):
    return hardware.get("b300").tdp_w + gpu.tdp_w


def _whole(gpu):
    return len(hardware.catalog()) + gpu.tdp_w


def test_a_cached_call_that_reads_the_catalog_itself_is_refused(fresh, tmp_path, monkeypatch):
    fn = memo.cached(_reads_a_row)
    g = hardware.get("gb200")
    for root in (None, tmp_path):  # plain calls (tests, library use) and the disk cache alike
        if root:
            monkeypatch.setenv(memo.ENV, str(root))
        with pytest.raises(TypeError, match=r"memo: test_hardware_reads\._reads_a_row read GPU row\(s\) b300 from "
                                            r"the catalog itself; its key covers only its arguments"):
            fn(g)


def test_a_cached_call_keyed_on_the_whole_file_records_all_on_a_hit(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv(memo.ENV, str(tmp_path))
    fn = memo.cached(_whole, data=("hardware.csv",))
    g = hardware.get("gb200")
    first = fn(g)
    hardware.forget_reads()
    assert fn(g) == first and memo.STATS["test_hardware_reads._whole"]["hit"] >= 1
    assert hardware.reads() == (hardware.ALL,)


def test_a_search_is_keyed_on_its_gpus_row_only(fresh, tmp_path, monkeypatch):
    """A chapter that re-executes after a catalog edit recomputes only the edited GPU's searches."""
    path = tmp_path / "hardware.csv"
    path.write_bytes(hardware.HARDWARE_CSV.read_bytes())
    monkeypatch.setattr(hardware, "HARDWARE_CSV", path)
    m = models.get("megatron_1t")

    def keys():
        hardware.catalog.cache_clear()
        return {g: memo.key(search.search, (m, "fp8", hardware.get(g), 4096), {"tokens_per_step": 2**22},
                            search.SEARCH_DATA) for g in ("h100_sxm", "b300")}

    before = keys()
    edit_gpu_row(path, "b300", "tdp_w", "1234")
    after = keys()
    hardware.catalog.cache_clear()
    assert after["h100_sxm"] == before["h100_sxm"] and after["b300"] != before["b300"]


def _waits_then_uses(gpu, started, go):
    started.set()
    go.wait(5)
    return gpu.tdp_w


def test_a_read_in_another_thread_is_not_charged_to_a_cached_call_running_beside_it(fresh):
    """A chapter's searches run side by side in threads (jobserver.map): a catalog read by one
    thread is not a read of the cached call another thread computes meanwhile."""
    fn = memo.cached(_waits_then_uses)
    g = hardware.get("gb200")
    started, go, out = threading.Event(), threading.Event(), []
    t = threading.Thread(target=lambda: out.append(fn(g, started, go)))
    t.start()
    assert started.wait(5)
    hardware.get("b300")  # this thread's read, while the call computes in the other
    go.set()
    t.join(5)
    assert out == [g.tdp_w]
    assert {"gb200", "b300"} <= set(hardware.reads())  # both reads stay in the process's record
