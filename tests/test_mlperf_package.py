"""Packages MLCommons' own tools read (issue 27 item 3): the package's system_description.json passes
mlperf_logging's system-description checker with every required field a string, and its events.log
parses with mlperf_logging's parser. The readers behind the fields work on sample /sys and /proc
files; a node without accelerators says "0" and "N/A"; the owner's facts come from --submitter and
--status over the run's config over the site file; a bad --status is one line, exit 2."""

from __future__ import annotations

import json
import logging
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from mlperf_logging.compliance_checker import mlp_parser
from mlperf_logging.system_desc_checker.system_desc_checker import check_system_desc

from aiperf.errors import UserError
from aiperf.report import package
from aiperf.system import description as system_description
from aiperf.system import hostfacts, mlperf

RDI = "Research, Development, or Internal (RDI)"


def _checked(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """MLCommons' checker passes the file under training 6.1.0 (which checks the status's words too)
    and hpc 3.0.0, and every field it requires is a string."""
    for usage, ruleset in (("training", "6.1.0"), ("hpc", "3.0.0")):
        with caplog.at_level(logging.INFO):
            valid, name, _prefix, _postfix = check_system_desc(str(path), usage, ruleset)
        assert valid, caplog.text
    described = json.loads(path.read_text())
    assert [f for f in mlperf.REQUIRED_FIELDS if not isinstance(described.get(f), str)] == []
    assert list(described)[: len(mlperf.REQUIRED_FIELDS)] == list(mlperf.REQUIRED_FIELDS)


# --- the package of a real run --------------------------------------------------------------------


@pytest.fixture(scope="module")
def named_run(short_real_run):
    """The session's short real run (conftest.py), whose system is named with --set."""
    return short_real_run.config, short_real_run.run_id


def aiperf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aiperf.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"COLUMNS": "250", "PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


@pytest.mark.slow
def test_mlcommons_tools_read_the_package(named_run, tmp_path, caplog):
    config, run_id = named_run
    done = aiperf(
        "package", str(run_id), "--to", str(tmp_path / "p"), "--db", config.db,
        "--submitter", "Test Lab", "--status", "available",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "p"
    _checked(folder / "system_description.json", caplog)
    described = json.loads((folder / "system_description.json").read_text())
    assert described["submitter"] == "Test Lab" and described["status"] == "Available on-premise"
    assert described["system_name"] == "test-box" and described["cooling"] == "air"
    assert described["number_of_nodes"] == "1" and described["division"] == "open"  # TINY
    assert described["host_processor_frequency"].endswith("GHz")
    assert described["host_processor_caches"] != "N/A"  # every Linux has /sys/.../cache
    assert described["nodes"][0]["workers"], "aiperf's own fields stay beside MLPerf's"
    # MLCommons' parser reads every line of the event log, with no error.
    for ruleset in ("6.1.0", "4.0.0"):
        lines, errors = mlp_parser.parse_file(str(folder / "events.log"), ruleset=ruleset)
        assert errors == [] and len(lines) == len((folder / "events.log").read_text().splitlines())
    # The package is still one aiperf verifies, and the results list reads its submitter.
    _logged, checks = package.verify_package(folder)
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]


@pytest.mark.slow
def test_a_bad_status_is_one_line(named_run, tmp_path):
    config, run_id = named_run
    bad = aiperf(
        "package", str(run_id), "--to", str(tmp_path / "p"), "--db", config.db, "--status", "gold"
    )
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "--status: 'gold' is not a status; give one of available, cloud" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    assert not (tmp_path / "p").exists(), "nothing is written"


# --- the MLPerf form of a description ---------------------------------------------------------------


def test_a_node_without_accelerators_says_0_and_na(tmp_path, caplog, monkeypatch):
    monkeypatch.delenv("AIPERF_PROFILE_DIR", raising=False)
    node = {**system_description.describe_node(), "accelerators": [], "accelerators_per_node": 0}
    node.update(accelerator_model_name="none", accelerator_memory_capacity="n/a")
    described = mlperf.mlperf_description(
        system_description.describe_system({"tcp://a:1": node}), None, division="open"
    )
    assert described["accelerators_per_node"] == "0"
    assert all(described[f] == "N/A" for f in mlperf.ACCELERATOR_FIELDS)
    assert described["submitter"] == "N/A" and described["status"] == RDI
    assert described["host_processor_vcpu_count"] == str(node["host_processor_vcpu_count"])
    (tmp_path / "d.json").write_text(json.dumps(described))
    _checked(tmp_path / "d.json", caplog)


def test_a_gpu_node_names_its_accelerators_in_mlperf_form(tmp_path, caplog):
    gpus = [{"index": i, "model": "NVIDIA H100 80GB HBM3"} for i in range(4)]
    node = {
        **system_description.describe_node(),
        "hostname": "g1",
        "accelerators": gpus,
        "accelerators_per_node": 4,
        "accelerator_model_name": "NVIDIA H100 80GB HBM3",
        "accelerator_memory_capacity": "80 GB",
        "accelerator_interconnect": "NVLink (NV18)",
        "accelerator_links": [
            {"a": a, "b": b, "link": "NV18"} for a in range(4) for b in range(a + 1, 4)
        ],
        "accelerator_frequency": "1980 MHz",
        "accelerator_host_interconnect": "PCIe Gen5 x16",
    }
    second = {**node, "hostname": "g2"}
    described = mlperf.mlperf_description(
        system_description.describe_system({"tcp://g1:1": node, "tcp://g2:1": second}),
        {"system": {"submitter": "Lab"}},
        division="closed",
    )
    assert described["accelerators_per_node"] == "4" and described["number_of_nodes"] == "2"
    assert described["system_name"] == "g1+g2" and described["submitter"] == "Lab"
    assert described["accelerator_interconnect_topology"] == "all-to-all NVLink (4 GPUs)"
    assert described["accelerator_frequency"] == "1980 MHz"
    assert described["accelerator_host_interconnect"] == "PCIe Gen5 x16"
    assert described["accelerator_memory_capacity"] == "80 GB"
    (tmp_path / "d.json").write_text(json.dumps(described))
    _checked(tmp_path / "d.json", caplog)


def test_the_submitter_flag_wins_over_the_run_over_the_site_file(tmp_path, monkeypatch):
    monkeypatch.setenv("AIPERF_PROFILE_DIR", str(tmp_path))
    assert mlperf.owner_facts(None)["submitter"] is None  # nothing says: N/A in the package
    (tmp_path / "_site.yaml").write_text("system:\n  submitter: Site\n  cooling: liquid\n")
    assert mlperf.owner_facts(None)["submitter"] == "Site"
    stored = {"system": {"submitter": "Run", "status": "preview"}}
    facts = mlperf.owner_facts(stored)
    assert facts["submitter"] == "Run" and facts["cooling"] == "liquid"
    assert facts["status"] == "Preview"
    flagged = mlperf.owner_facts(stored, submitter="Flag", status="cloud")
    assert flagged["submitter"] == "Flag" and flagged["status"] == "Available cloud"
    assert mlperf.owner_facts(stored, status=RDI)["status"] == RDI  # MLPerf's own words too
    with pytest.raises(UserError, match="--status: 'gold' is not a status"):
        mlperf.owner_facts(stored, status="gold")


# --- the readers, on sample /sys and /proc files ------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CPUINFO = (
    "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz\n"
    "cpu MHz\t\t: 3799.998\ncache size\t: 107520 KB\n"
)


def test_the_cpu_frequency_from_cpufreq_the_model_name_or_cpuinfo(tmp_path):
    cpu0 = "sys/devices/system/cpu/cpu0"
    both = _write(
        tmp_path / "a", {f"{cpu0}/cpufreq/cpuinfo_max_freq": "3800000\n", "proc/cpuinfo": CPUINFO}
    )
    assert hostfacts.cpu_frequency(both) == "3.80 GHz"
    assert hostfacts.cpu_frequency(_write(tmp_path / "b", {"proc/cpuinfo": CPUINFO})) == "2.00 GHz"
    vm = "model name\t: AMD EPYC\ncpu MHz\t\t: 2596.122\n"
    assert hostfacts.cpu_frequency(_write(tmp_path / "c", {"proc/cpuinfo": vm})) == "2.60 GHz"
    assert hostfacts.cpu_frequency(tmp_path / "none") == "N/A"


def test_the_caches_from_every_cpu_counted_once_each(tmp_path):
    files = {}
    for cpu in range(4):
        for index, (level, kind, size, shared) in enumerate(
            [
                ("1", "Data", "48K", str(cpu)),
                ("1", "Instruction", "32K", str(cpu)),
                ("2", "Unified", "2048K", str(cpu)),
                ("3", "Unified", "107520K", "0-3"),
            ]
        ):
            base = f"sys/devices/system/cpu/cpu{cpu}/cache/index{index}"
            files |= {f"{base}/level": level, f"{base}/type": kind, f"{base}/size": size}
            files[f"{base}/shared_cpu_list"] = shared
    root = _write(tmp_path / "sys4", files)
    assert (
        hostfacts.cpu_caches(root)
        == "L1d 48 KiB x 4, L1i 32 KiB x 4, L2 2 MiB x 4, L3 105 MiB x 1"
    )
    only_cpuinfo = _write(tmp_path / "old", {"proc/cpuinfo": CPUINFO})
    assert hostfacts.cpu_caches(only_cpuinfo) == "105 MiB per core (/proc/cpuinfo)"
    assert hostfacts.cpu_caches(tmp_path / "none") == "N/A"


def _dimm(size_mb: int, kind: int, speed: int) -> bytes:
    """An SMBIOS 3.x type-17 structure (0x28 bytes formatted) as sysfs' raw file holds it."""
    raw = bytearray(0x28)
    raw[0], raw[1] = 17, 0x28
    if size_mb >= 0x7FFF:
        struct.pack_into("<H", raw, 0x0C, 0x7FFF)
        struct.pack_into("<I", raw, 0x1C, size_mb)
    else:
        struct.pack_into("<H", raw, 0x0C, size_mb)
    raw[0x12] = kind
    struct.pack_into("<H", raw, 0x15, speed)
    return bytes(raw) + b"\0\0"


def test_the_memory_configuration_from_smbios_else_numa(tmp_path):
    root = tmp_path / "dmi"
    for slot, raw in enumerate(
        [_dimm(65536, 0x22, 4800)] * 16 + [_dimm(0, 0x02, 0)] + [_dimm(16384, 0x1A, 3200)]
    ):
        entry = root / f"sys/firmware/dmi/entries/17-{slot}"
        entry.mkdir(parents=True)
        (entry / "raw").write_bytes(raw)
    assert (
        hostfacts.memory_configuration(root) == "16x 64 GB DDR5 4800 MT/s, 1x 16 GB DDR4 3200 MT/s"
    )
    numa = _write(
        tmp_path / "numa", {f"sys/devices/system/node/node{i}/meminfo": "" for i in range(2)}
    )
    assert hostfacts.memory_configuration(numa) == "2 NUMA nodes (DIMMs not readable here)"
    assert hostfacts.memory_configuration(tmp_path / "none") == "N/A"


def test_the_storage_type_of_the_out_folder(tmp_path):
    assert hostfacts.storage_type("ext4", "nvme0n1", "0") == "NVMe SSD"
    assert hostfacts.storage_type("xfs", "sda", "0") == "SSD"
    assert hostfacts.storage_type("xfs", "sdb", "1") == "HDD"
    assert hostfacts.storage_type("ext4", "vda", "1") == "virtual disk"
    assert hostfacts.storage_type("lustre", None, None) == "Lustre (network)"
    assert hostfacts.storage_type("tmpfs", None, None) == "RAM (tmpfs)"
    assert hostfacts.storage_type("overlay", None, None) == "overlay"
    mountinfo = (
        "22 1 259:2 / / rw,relatime - ext4 /dev/nvme0n1p2 rw\n"
        "40 22 0:45 / /scratch rw - lustre 10.0.0.1@o2ib:/fs rw\n"
    )
    assert hostfacts._mount(Path("/scratch/run/out"), mountinfo) == (
        "0:45",
        "lustre",
        "10.0.0.1@o2ib:/fs",
    )
    assert hostfacts._mount(Path("/home/u"), mountinfo) == ("259:2", "ext4", "/dev/nvme0n1p2")
    kind, capacity = hostfacts.storage(tmp_path / "not" / "yet")  # this machine, its real disk
    assert kind != "" and capacity.endswith(("GB", "TB"))


def test_the_gpus_clock_and_host_link_from_nvidia_smi():
    facts = hostfacts.parse_gpu_facts("1980, 5, 16\n1980, 5, 16\n[N/A], [N/A], [N/A]\n")
    assert hostfacts.accelerator_frequency(facts) == "1980 MHz"
    assert hostfacts.accelerator_host_interconnect(facts) == "PCIe Gen5 x16"
    assert hostfacts.accelerator_frequency([]) == "N/A"
    assert hostfacts.accelerator_host_interconnect(facts[2:]) == "N/A"
