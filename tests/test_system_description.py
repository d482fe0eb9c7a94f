"""The system description (aiperf.system.description): what a node says of itself, grouped by host into
nodes in MLPerf's fields, its GPUs as nvidia-smi describes them (a stand-in nvidia-smi on PATH
prints what an 8-GPU NVLink node and a 2-GPU PCIe node print); and how the report shows it and
the search tree."""

from __future__ import annotations

import socket
from datetime import timedelta

import psutil
import pytest
from claims import claim_of
from nvidia_smi_samples import (
    H100_NODE,
    L40S_NODE,
    NO_DRIVER,
    calls,
    put_first_on_path,
    stand_in,
)
from records import T0, run_record

from aiperf.config import host, load_config
from aiperf.errors import UserError
from aiperf.report.system import system_section
from aiperf.report.tree import generations, search_tree_html
from aiperf.results.division import classify
from aiperf.status import TrialStatus
from aiperf.store import RunRecord, RunStart, TrialRecord
from aiperf.system import description as system_description
from aiperf.system import nvidia_gpus
from aiperf.system.fingerprint import cpu_model


def test_a_node_names_its_cpu_cores_and_memory():
    node = system_description.describe_node()
    assert node["hostname"] == socket.gethostname()
    assert node["host_processor_model_name"] == cpu_model()
    assert node["host_processor_vcpu_count"] == psutil.cpu_count(logical=True)
    assert node["host_memory_bytes"] == psutil.virtual_memory().total
    assert node["host_memory_capacity"].endswith(("GB", "MB"))
    assert node["host_processors_per_node"] >= 1 and node["host_processor_core_count"] >= 1
    assert node["accelerators_per_node"] == len(node["accelerators"])
    assert node["python_version"] and "keras" in node["framework_versions"]
    assert isinstance(node["host_networking"], list)


def _node(host: str, job: str | None = None, **changes) -> dict:
    node = {**system_description.describe_node(), "hostname": host, **changes}
    node["job"] = {"scheduler": "slurm", "job_id": job, "node": host} if job else None
    return node


def test_workers_are_grouped_by_host_into_nodes():
    one = system_description.describe_system(
        {"tcp://a:1": _node("a"), "tcp://a:2": _node("a")}, division="open"
    )
    assert one["number_of_nodes"] == 1 and one["workers"] == 2
    assert one["nodes"][0]["workers"] == ["tcp://a:1", "tcp://a:2"]
    assert (
        one["division"] == "open" and one["precision"] == "float32" and one["system_name"] == "a"
    )
    two = system_description.describe_system(
        {"tcp://a:1": _node("a", "11"), "tcp://b:1": _node("b", "12")}
    )
    assert two["number_of_nodes"] == 2 and two["system_name"] == "a, b"
    assert [n["jobs"] for n in two["nodes"]] == [
        [{"scheduler": "slurm", "job_id": "11", "node": "a"}],
        [{"scheduler": "slurm", "job_id": "12", "node": "b"}],
    ]
    mixed = system_description.describe_system(
        {
            "w1": _node("a", host_processor_model_name="cpu x"),
            "w2": _node("b", host_processor_model_name="cpu y"),
        }
    )
    assert mixed["host_processor_model_name"] == "cpu x; cpu y", (
        "nodes that differ show every value"
    )


def test_a_job_names_its_node(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURMD_NODENAME", "node-7")
    assert system_description.describe_node()["job"] == {
        "scheduler": "slurm",
        "job_id": "42",
        "node": "node-7",
    }


# --- the report's sections ---------------------------------------------------------------------------


def _trial(number: int, parent: int | None, operator: str, status: TrialStatus) -> TrialRecord:
    return TrialRecord(
        id=100 + number,
        run_id=1,
        trial_key=f"{number:02d}",
        number=number,
        parent_trial_id=None if parent is None else 100 + parent,
        operator=operator,
        architecture={},
        hyperparameters={},
        status=status,
        worker="w",
        started_at=T0 + timedelta(seconds=number),
        ended_at=None,
        parameters=10,
        train_ops_per_sample=1000,
        eval_ops_per_sample=300,
        tensor_train_ops_per_sample=1000,
        tensor_eval_ops_per_sample=300,
        best_val_accuracy=0.5,
        message=None,
    )


def _run(trials=(), description=None) -> RunRecord:
    return run_record(trials, system_description=description)


def test_the_search_tree_is_an_outline_by_parent():
    trials = [
        _trial(0, None, "seed", TrialStatus.COMPLETED),
        _trial(1, 0, "widen stage 1 <x>", TrialStatus.COMPLETED),
        _trial(2, 0, "deepen", TrialStatus.FAILED),
        _trial(3, 1, "add skip", TrialStatus.STOPPED),
    ]
    run = _run(trials)
    assert generations(run) == {100: 0, 101: 1, 102: 1, 103: 2}
    tree = search_tree_html(run)
    assert tree.count('class="trial') == 4 and tree.count("<details") == 2, (
        "00 and 01 have children"
    )
    assert "widen stage 1 &lt;x&gt;" in tree, "escaped operators"
    where = [tree.index(f'data-trial="{key}"') for key in ("00", "01", "03", "02")]
    assert where == sorted(where), "each trial under its parent, a subtree before the next sibling"
    assert 'data-trial="02" data-status="failed"' in tree and "#d62728" in tree
    assert search_tree_html(_run()) == "<p class=note>No trials.</p>"


def test_a_parent_cycle_does_not_hang_the_tree():
    looped = [_trial(0, 1, "a", TrialStatus.COMPLETED), _trial(1, 0, "b", TrialStatus.COMPLETED)]
    assert set(generations(_run(looped))) == {100, 101}
    assert search_tree_html(_run(looped)).count('class="trial') == 2


def test_the_system_section_shows_the_nodes():
    description = system_description.describe_system(
        {"tcp://a:1": _node("node-a", "11")}, division="open"
    )
    html = system_section(_run(description=description))
    assert "node-a" in html and cpu_model() in html and "slurm job 11 on node-a" in html
    assert "memory per node" in html
    assert "No system description" in system_section(_run())


def test_accelerators_as_nvidia_smi_lists_them():
    gpus = nvidia_gpus.parse_gpus(
        "NVIDIA H200, 143771, 570.124.06\nNVIDIA H200, 143771, 570.124.06\nSome Board, [N/A], 570.124.06\n\n",
        cuda_version="12.8",
    )
    h200 = {"model": "NVIDIA H200", "memory_bytes": 143771 * 2**20}
    versions = {"driver_version": "570.124.06", "cuda_version": "12.8"}
    assert gpus == [
        {"index": 0, **h200, **versions},
        {"index": 1, **h200, **versions},
        {"index": 2, "model": "Some Board", "memory_bytes": None, **versions},
    ]
    older = nvidia_gpus.parse_gpus("NVIDIA H200, 143771\nTesla K80, Rev 2, 11441")
    assert [(g["model"], g["memory_bytes"], g["driver_version"]) for g in older] == [
        ("NVIDIA H200", 143771 * 2**20, None),
        ("Tesla K80, Rev 2", 11441 * 2**20, None),
    ], "without the driver field, a comma in a name stays in the name"
    node = _node(
        "g",
        accelerators=gpus[:2],
        accelerators_per_node=2,
        accelerator_model_name="NVIDIA H200",
        accelerator_memory_capacity="140 GB",
    )
    described = system_description.describe_system({"w": node})
    assert (described["accelerators_per_node"], described["accelerator_model_name"]) == (
        2,
        "NVIDIA H200",
    )


def test_the_cuda_version_is_read_from_the_header():
    assert nvidia_gpus.parse_cuda_version(H100_NODE["header"]) == "12.4"
    assert nvidia_gpus.parse_cuda_version(L40S_NODE["header"]) == "12.2"
    assert (
        nvidia_gpus.parse_cuda_version("Driver Version : 580.65.06\nCUDA Version : 13.0") == "13.0"
    )
    assert nvidia_gpus.parse_cuda_version(NO_DRIVER) is None


def test_the_links_between_gpus_are_read_from_the_topology_matrix():
    nvlink = nvidia_gpus.parse_topology(H100_NODE["topo"])
    assert len(nvlink) == 28 and nvlink[0] == {"a": 0, "b": 1, "link": "NV18"}
    assert {p["link"] for p in nvlink} == {"NV18"}, "NIC columns and affinities left out"
    assert all(p["a"] < p["b"] <= 7 for p in nvlink)
    assert nvidia_gpus.summarise_links(nvlink) == "NVLink (NV18)"
    pcie = nvidia_gpus.parse_topology(L40S_NODE["topo"])
    assert pcie == [{"a": 0, "b": 1, "link": "SYS"}]
    assert nvidia_gpus.summarise_links(pcie) == "PCIe (SYS)"
    mixed = [{"a": 0, "b": 1, "link": "NV4"}, {"a": 0, "b": 2, "link": "SYS"}]
    mixed += [{"a": 1, "b": 2, "link": "PHB"}, {"a": 2, "b": 3, "link": "NV12"}]
    assert nvidia_gpus.summarise_links(mixed) == "NVLink (NV4, NV12); PCIe (PHB, SYS)"
    coloured = "\x1b[4m" + L40S_NODE["topo"].replace("GPU1\t", "\x1b[0mGPU1\t", 1)
    assert nvidia_gpus.parse_topology(coloured) == pcie
    assert nvidia_gpus.parse_topology("") == [] and nvidia_gpus.summarise_links([]) is None


@pytest.mark.parametrize(
    ("sample", "count", "interconnect", "driver", "cuda"),
    [
        (H100_NODE, 8, "NVLink (NV18)", "550.54.15", "12.4"),
        (L40S_NODE, 2, "PCIe (SYS)", "535.161.08", "12.2"),
    ],
)
def test_a_gpu_node_describes_each_gpu_and_their_links(
    tmp_path, monkeypatch, sample, count, interconnect, driver, cuda
):
    put_first_on_path(monkeypatch, stand_in(tmp_path / "bin", sample))
    node = system_description.describe_node()
    assert node["accelerators_per_node"] == len(node["accelerators"]) == count
    assert [g["index"] for g in node["accelerators"]] == list(range(count))
    assert {(g["driver_version"], g["cuda_version"]) for g in node["accelerators"]} == {
        (driver, cuda)
    }
    assert node["accelerator_interconnect"] == interconnect
    assert len(node["accelerator_links"]) == count * (count - 1) // 2
    assert (node["cuda_driver_version"], node["cuda_version"]) == (driver, cuda)
    described = system_description.describe_system({"w": node})
    assert described["accelerator_interconnect"] == interconnect
    assert (described["cuda_driver_version"], described["cuda_version"]) == (driver, cuda)


def test_a_node_without_gpus_spawns_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))

    def spawn(*args, **kwargs):
        raise AssertionError(f"spawned {args}")

    monkeypatch.setattr(host.subprocess, "run", spawn)
    node = system_description.describe_node()
    assert node["accelerators"] == [] and node["accelerators_per_node"] == 0
    assert (node["accelerator_interconnect"], node["cuda_version"]) == ("n/a", "n/a")
    failing = stand_in(tmp_path / "failing", fail=True)
    monkeypatch.undo()
    put_first_on_path(monkeypatch, failing)
    assert system_description.describe_node()["accelerators"] == []
    assert calls(failing) == [f"--query-gpu={nvidia_gpus.QUERY} --format=csv,noheader,nounits"]


def test_the_description_is_stored_with_the_run(db_url):
    from test_history_data import system_facts

    from aiperf.store import Store

    description = system_description.describe_system(
        {"tcp://a:1": _node("node-a", "11")}, division="open"
    )
    with Store.open(db_url) as store:
        run_id = store.create_run(
            RunStart(profile="quick", config={}, seed=0, budget_s=1, workers=1),
            system_id=store.upsert_system(system_facts()),
        ).run_id
        assert store.get_run(run_id).system_description is None
        store.save_system_description(claim_of(store, run_id), description)
        store.save_system_description(
            claim_of(store, run_id), description
        )  # a retry, or a resumed run: the latest stands
        assert store.get_run(run_id).system_description == description


def test_the_system_name_is_the_users_else_the_hostnames():
    def described(*hosts: str) -> dict:
        return {"nodes": [{"hostname": h} for h in hosts], "system_name": ", ".join(hosts)}

    name = system_description.system_name
    assert name(described("node1")) == "node1"
    assert name(described("node2", "node1")) == "node1+node2"
    eight = described(*(f"node{i}" for i in (10, 2, 3, 4, 5, 6, 7, 8, 9, 1)))
    assert name(eight) == "node1..node10 (10 nodes)"
    assert name(described("a"), {"system": {"name": "Frontier-lab"}}) == "Frontier-lab"
    assert name(described("a"), {"system": {"name": None}}) == "a"
    assert name(described("a"), load_config("quick", budget="10s", workers=1)) == "a"
    assert name({"system_name": "old-host"}) == "old-host"  # recorded before nodes were listed
    assert name(None) == "unknown system"


def test_the_system_facts_come_from_the_site_file_a_profile_and_set(tmp_path, monkeypatch):
    monkeypatch.setenv("AIPERF_PROFILE_DIR", str(tmp_path))
    plain = load_config("quick", budget="10s", workers=1)
    (tmp_path / "_site.yaml").write_text(
        "system:\n  name: lab-box\n  submitter: Lab\n  status: rdi\n  cooling: air\n"
    )
    site = load_config("quick", budget="10s", workers=1)
    assert site.system.name == "lab-box" and site.system.submitter == "Lab"
    assert site.system.status == "Research, Development, or Internal (RDI)"
    named = load_config(
        "quick",
        budget="10s",
        workers=1,
        overrides={"system.name": "other", "system.status": "cloud"},
    )
    assert named.system.name == "other" and named.system.submitter == "Lab"
    assert named.system.status == "Available cloud"
    # A machine's name is no part of its workload: the hash and the division stay as they were.
    for config in (site, named):
        assert classify(config).config_hash == classify(plain).config_hash
        assert classify(config).name == classify(plain).name == "closed"


def test_bad_system_facts_are_refused_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(UserError, match=r"system\.status: 'gold' is not a status; give one of"):
        load_config("quick", budget="10s", workers=1, overrides={"system.status": "gold"})
    with pytest.raises(UserError, match="system.name: must be one line"):
        load_config("quick", budget="10s", workers=1, overrides={"system.name": "a\nb"})
    monkeypatch.setenv("AIPERF_PROFILE_DIR", str(tmp_path))
    (tmp_path / "_site.yaml").write_text("budget: 5m\n")
    with pytest.raises(UserError, match="must hold only a `system:` mapping"):
        load_config("quick", budget="10s", workers=1)


def test_each_node_records_what_only_its_kernel_can_say(tmp_path):
    """Read on the node as the run starts (aiperf.system.hostfacts), so a package written later or
    elsewhere still has them; the storage is that of the run's out folder, not yet made."""
    node = system_description.describe_node(folder=str(tmp_path / "out"))
    assert node["host_processor_frequency"].endswith("GHz")  # every Linux has /proc/cpuinfo
    assert (
        node["host_processor_caches"].startswith(("L1", "L2"))
        or "per core" in (node["host_processor_caches"])
    )
    assert node["host_storage_capacity"].endswith(("GB", "TB"))
    assert node["host_storage_type"] and node["host_memory_configuration"]
    if not node["accelerators"]:
        assert node["accelerator_frequency"] == node["accelerator_host_interconnect"] == "N/A"
    described = system_description.describe_system({"tcp://a:1": node})
    for field in system_description.HOSTFACTS:
        assert described[field] == node[field]
    older = {k: v for k, v in node.items() if k not in system_description.HOSTFACTS}
    assert system_description.describe_system({"tcp://a:1": older})["host_storage_type"] == "N/A"
