"""The compile cache: artifacts written after the first compiled step, found and used by a fresh process with empty
local caches, and left alone (with a message, compiling anew) when made by another torch or device, or damaged."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training.compile_cache import CompileCache

SHAPE = {"model": "probe", "batch_size": 2}

# compiles a small module's forward and backward with Inductor as `train` does (the traced program kept where asked),
# on the device and in the compile mode given, then prints what the caches gave and, on a GPU, how many CUDA graphs were
# recorded; then a new input shape, which Dynamo traces anew after a program was installed
PROBE = """
import json, sys, torch
from contextlib import nullcontext
from pathlib import Path
from training.compile_cache import CompileCache, Compiled, compile_counters
directory, device, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3] if sys.argv[3] != "default" else None
cache = CompileCache(directory, {"model": "probe", "batch_size": 2}, device)
loaded, compiled = cache.load(), Compiled(cache, traced=sys.argv[4] == "traced")
module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU(), torch.nn.Linear(8, 1)).to(device)
net = compiled.compile(module, mode, nullcontext())
for step in range(3):  # CUDA graphs are recorded on the third call
    torch.compiler.cudagraph_mark_step_begin()
    module.zero_grad(set_to_none=True)  # the last gradients are a graph's outputs: no accumulating into them
    with compiled.first_step() if step == 0 else nullcontext():
        net(torch.randn(2, 8, device=device)).sum().backward()
compiled.save()
saved = str(compiled.saved) if compiled.saved else None
report = {"kept": compiled.traced, "loaded": loaded, "note": cache.note, "saved": saved, "error": compiled.save_error,
          "precompile_after": torch._dynamo.config.caching_precompile}
if device == "cuda":
    from torch._inductor.cudagraph_trees import get_manager
    manager = get_manager(0, create_if_none_exists=False)
    def count(nodes):  # a forward's graph is a root, its backward's a child
        return sum(1 + count([c for cs in n.children.values() for c in cs]) for n in nodes)
    report["cuda_graphs"] = 0 if manager is None else count([n for ns in manager.roots.values() for n in ns])
report |= compile_counters()
module.zero_grad(set_to_none=True)
net(torch.randn(3, 8, device=device)).sum().backward()
print(json.dumps(report | {"new_shape": compile_counters()}))
"""


def probe(cache_dir: Path, local: Path, device: str = "cpu", mode: str = "default", traced: bool = True) -> dict:
    """A fresh interpreter whose own (local) Inductor cache holds none of this model's: all it can find is in
    `cache_dir`."""
    env = os.environ | {"TORCHINDUCTOR_CACHE_DIR": str(local), "TRITON_CACHE_DIR": str(local / "triton")}
    args = [sys.executable, "-c", PROBE, str(cache_dir), device, mode, "traced" if traced else "plain"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


OTHERS = {"dynamo/" + "ab" * 32 + "/entry": b"another project's traced program", "other/kernel.so": b"\x7fELF"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, dict, dict]:
    """(cache directory, the cold process's report, the warm process's report)."""
    root = tmp_path_factory.mktemp("compile-cache")
    for path, content in OTHERS.items():  # another project's compiled programs in the shared local cache
        (root / "local-cold" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "local-cold" / path).write_bytes(content)
    cold = probe(root / "cache", root / "local-cold")
    warm = probe(root / "cache", root / "local-warm")
    return root / "cache", cold, warm


@pytest.mark.slow
def test_first_process_builds_and_saves(saved):
    """With nothing in the directory, the first process says so, builds every graph and writes one file."""
    directory, cold, _ = saved
    assert not cold["loaded"] and "none yet for this run shape" in cold["note"]
    assert cold["caches"].get("fxgraph_cache_miss", 0) >= 2 and cold["caches"].get("fxgraph_cache_hit", 0) == 0
    files = list(directory.glob("probe-*.bin"))
    assert [str(p) for p in files] == [cold["saved"]]
    header = json.loads(files[0].read_bytes().split(b"\n", 1)[0])
    assert header["environment"]["torch"] == torch.__version__ and header["shape"] == SHAPE


@pytest.mark.slow
def test_fresh_process_uses_the_saved_artifacts(saved):
    """A process with empty local caches loads the file and finds every graph in it: nothing is built again, and
    nothing new is written (the file already holds it all)."""
    _, cold, warm = saved
    assert warm["loaded"] and warm["note"].startswith("loaded ")
    assert warm["caches"].get("fxgraph_cache_miss", 0) == 0 and warm["saved"] is None


@pytest.mark.slow
def test_fresh_process_installs_the_traced_program(saved):
    """The first process keeps Dynamo's traced program with the kernels; the next installs it at torch.compile and
    does not trace the model: the backend is never called, no graph is looked up or built (installing it loads the
    kernels, which torch times as the frame's compile)."""
    _, cold, warm = saved
    assert cold["kept"] and warm["kept"] and cold["precompile_after"] and warm["precompile_after"]
    assert cold["caches"].get("dynamo_cache_miss") == 1 and "entire_frame_compile" in cold["phases_s"]
    assert warm["caches"] == {"dynamo_cache_hit": 1} and "backend_compile" not in warm["phases_s"]


@pytest.mark.slow
def test_another_projects_files_in_the_shared_local_cache_survive(saved):
    """TORCHINDUCTOR_CACHE_DIR is shared: a compile that keeps its traced program there leaves every file of another
    project's as it was, a traced program of its own included."""
    local = saved[0].parent / "local-cold"
    assert {path: (local / path).read_bytes() for path in OTHERS} == OTHERS


@pytest.mark.slow
def test_a_new_shape_after_an_installed_program_is_traced_anew(saved):
    """After a program from the cache is installed, a new input shape makes Dynamo trace again; the names the program
    brought into the module are not taken twice (torch stops on an assertion where they are)."""
    _, _, warm = saved
    assert warm["new_shape"]["phases_s"].get("backend_compile", 0) > 0
    assert warm["new_shape"]["caches"].get("fxgraph_cache_miss", 0) >= 1


@pytest.mark.gpu
@pytest.mark.slow
def test_an_installed_program_keeps_its_cuda_graphs(tmp_path):
    """Under "reduce-overhead" a program installed from the cache runs in CUDA graphs as the traced one did: torch
    rebuilds its graphs without Inductor and reads that switch from the global options, which `Compiled.compile`
    sets from the mode (without them an H100 trained at half the rate)."""
    cold = probe(tmp_path / "cache", tmp_path / "local-cold", "cuda", "reduce-overhead")
    warm = probe(tmp_path / "cache", tmp_path / "local-warm", "cuda", "reduce-overhead")
    assert warm["caches"].get("dynamo_cache_hit") == 1
    assert cold["cuda_graphs"] >= 2 and warm["cuda_graphs"] == cold["cuda_graphs"]


def doctored(saved, tmp_path: Path, **environment) -> CompileCache:
    """The saved file, its header claiming another environment, where this environment's file would be."""
    directory = saved[0]
    (source,) = directory.glob("probe-*.bin")
    header, payload = source.read_bytes().split(b"\n", 1)
    header = json.loads(header)
    header["environment"] |= environment
    cache = CompileCache(tmp_path, SHAPE, "cpu")
    tmp_path.mkdir(exist_ok=True)
    cache.path.write_bytes(json.dumps(header).encode() + b"\n" + payload)
    return cache


@pytest.mark.slow
def test_unusable_cache_costs_the_next_run_not_this_one(saved, tmp_path):
    """A compile cache "directory" that is a file: the process compiles, runs on, and says in one note why the cache
    is not used (`train` refuses such a path before it starts: tests/training/test_compile_cache_trust.py)."""
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache folder should be")
    report = probe(blocked, saved[0].parent / "local-cold")  # that local cache holds the kernels: no build again
    assert report["saved"] is None and report["error"] is None
    assert report["note"].startswith(f"not used: {blocked}: Not a directory; ") and "compiling anew" in report["note"]


@pytest.mark.slow
def test_file_from_another_torch_is_not_loaded(saved, tmp_path):
    """A file whose header names another torch build is refused before torch reads it; the note says what made it and
    that the run compiles anew."""
    cache = doctored(saved, tmp_path, torch="0.0.1")
    assert not cache.load() and not cache.loaded
    assert "made with torch 0.0.1 on cpu" in cache.note and "compiling anew" in cache.note


@pytest.mark.slow
def test_files_for_other_devices_only_are_named(saved, tmp_path):
    """Where the directory holds this run shape's artifacts for another GPU only, the note names that GPU."""
    other = doctored(saved, tmp_path, device="NVIDIA H100 80GB HBM3")
    other.path.rename(other.path.with_name(other.stem + "-0123456789ab.bin"))
    cache = CompileCache(tmp_path, SHAPE, "cpu")
    assert not cache.load()
    assert "for torch" in cache.note and "NVIDIA H100 80GB HBM3 only" in cache.note and "compiling anew" in cache.note


@pytest.mark.slow
@pytest.mark.parametrize("gpu", [True, False])
def test_a_gpu_cache_from_another_inductor_folder_says_how_to_keep_its_tuning(saved, tmp_path, gpu):
    """Triton kernels restored from the artifacts look for their autotuning results where they were compiled: a GPU
    file saved under another local Inductor cache loads, and the note names that folder and the variable that
    avoids tuning again. A CPU file (no Triton autotuning) says nothing of it."""
    from common.torch_private import inductor_dir

    (source,) = saved[0].glob("probe-*.bin")
    header, payload = source.read_bytes().split(b"\n", 1)
    header = json.loads(header)
    assert header["inductor_cache_dir"] == str(saved[0].parent / "local-cold")  # the cold probe's own folder
    cache = CompileCache(tmp_path, SHAPE, "cpu")
    if gpu:
        cache.env = header["environment"] = header["environment"] | {"capability": "9.0"}
    tmp_path.mkdir(exist_ok=True)
    cache.path.write_bytes(json.dumps(header).encode() + b"\n" + payload)
    assert cache.load() and cache.note.startswith("loaded ")
    assert inductor_dir() != header["inductor_cache_dir"]
    moved = f"compiled under {header['inductor_cache_dir']}, this run's Inductor cache is {inductor_dir()}"
    assert (moved in cache.note and f"TORCHINDUCTOR_CACHE_DIR={header['inductor_cache_dir']}" in cache.note) == gpu


@pytest.mark.slow
def test_damaged_file_is_not_loaded(saved, tmp_path):
    """A truncated file fails its checksum: not loaded, the note says so; a file that is no cache at all likewise."""
    cache = doctored(saved, tmp_path)
    cache.path.write_bytes(cache.path.read_bytes()[:-100])
    assert not cache.load() and "checksum" in cache.note and str(cache.path) in cache.note
    cache.path.write_bytes(b"\x00\x01 not json\n")
    assert not cache.load() and "not a gpufeed compile cache" in cache.note


def test_shape_and_environment_name_the_file(tmp_path):
    """Another run shape is another file; the same shape in the same environment is the same file."""
    a, b = CompileCache(tmp_path, SHAPE, "cpu"), CompileCache(tmp_path, SHAPE | {"batch_size": 4}, "cpu")
    assert a.path != b.path and a.path == CompileCache(tmp_path, dict(SHAPE), "cpu").path
    assert a.path.name.startswith("probe-") and a.path.parent == tmp_path
    assert not a.load() and "none yet" in a.note  # an empty (here: missing) directory is no error


@pytest.mark.slow
def test_train_compiled_says_so_and_the_next_run_builds_nothing(cifar_small, tmp_path):
    """`train --compile` on the CPU (Inductor, bf16 autocast): the log says it is compiling and for how long, the
    kernels and the traced program are saved; a second run with empty local caches installs the program, whose guards
    hold under the step's autocast, and neither traces nor builds; summary.json says where the time went."""

    def run(name: str) -> tuple[str, dict]:
        out = tmp_path / name
        args = [
            "-m",
            "training",
            "--data",
            str(cifar_small),
            "--out",
            str(out),
            "--loader",
            "gpu",
            "--model",
            "tiny",
            "--batch-size",
            "4",
            "--steps",
            "2",
            "--precision",
            "bf16",
            "--device",
            "cpu",
            "--workers",
            "0",
            "--no-pin-memory",
            "--sample-every",
            "0",
            "--ckpt-every",
            "0",
            "--no-progress",
            "--log-every",
            "2",
            "--timing-warmup",
            "1",
            "--compile",
            "--compile-cache",
            str(tmp_path / "cache"),
            "--compile-traced-program",
        ]
        env = os.environ | {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"local-{name}")}
        done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f" found in caches); kernels kept in {tmp_path / 'cache'}" in done.stdout  # the closing lines
        return done.stderr, json.loads((out / "summary.json").read_text())["compile"]

    log, first = run("cold")
    assert "compile cache: none yet for this run shape" in log and "step 1: compiling the model" in log
    assert "step 1: compiled in " in log and " built); kernels saved to " in log
    assert first["first_step_s"] > 0 and first["phases_s"]["inductor_compile"] > 0
    assert first["timed_since_launch_s"] > first["since_launch_s"]  # the timed step 2 starts after step 1 is done
    marks = list(first["set_up_s"].values())  # the set-up's points, in order, all before the first step ends
    assert list(first["set_up_s"]) == [
        "imports done",
        "model on the device",
        "compile cache loaded",
        "model compiled",
        "loader open",
        "first batch in hand",
        "FLOPs counted",
    ]
    assert 0 < marks[0] and marks == sorted(marks) and marks[-1] < first["since_launch_s"] - first["first_step_s"] + 1
    assert first["caches"]["fxgraph_cache_miss"] >= 2 and Path(first["cache"]["saved"]).is_file()
    # AOTAutograd's cache is used, though the UNet holds a custom autograd.Function (a bypass would trace anew)
    assert first["caches"]["autograd_cache_miss"] == 1 and "autograd_cache_bypass" not in first["caches"]
    assert first["caches"]["dynamo_cache_miss"] == 1
    log, second = run("warm")
    assert "compile cache: loaded " in log and "; the traced program installed in " in log
    assert "(the traced program found in caches, 0 built)" in log
    assert second["caches"] == {"dynamo_cache_hit": 1} and second["cache"]["loaded"]["inductor"] >= 2
    assert "backend_compile" not in second["phases_s"] and "entire_backward_compile" not in second["phases_s"]


@pytest.mark.slow
def test_what_it_saves_is_private(saved):
    """The folder the first process created is readable and writable by its user alone, and so is the file."""
    directory = saved[0]
    (path,) = directory.glob("probe-*.bin")
    assert directory.stat().st_mode & 0o777 == 0o700 and path.stat().st_mode & 0o777 == 0o600


@pytest.mark.slow
@pytest.mark.parametrize("owner", ["another user", "group-writable"])
def test_a_file_another_user_could_have_written_never_reaches_torch(saved, tmp_path, monkeypatch, owner):
    """A real cache file owned by another uid, or writable by its group, is not handed to torch, whose loading would
    copy its artifacts into the local Inductor cache (where later runs, even with --no-compile-cache, find them): the
    local cache stays empty and the note says why. The same file, made this user's alone, loads and fills it."""
    local = tmp_path / "local"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(local))
    cache = doctored(saved, tmp_path / "cache")
    if owner == "another user":
        os.chown(cache.path, 4321, 4321)
    else:
        cache.path.chmod(0o664)
    assert not cache.load() and not cache.loaded
    why = "belongs to uid 4321, not to you" if owner == "another user" else "can be written by its group (mode 0664)"
    assert f"{cache.path} not loaded: {cache.path} {why}" in cache.note and "compiling anew" in cache.note
    assert not local.exists() or not any(p.is_file() for p in local.rglob("*"))
    os.chown(cache.path, os.geteuid(), os.getegid())
    cache.path.chmod(0o600)
    assert cache.load() and any(p.is_file() for p in local.rglob("*"))


@pytest.mark.slow
def test_a_torch_without_a_private_switch_trains_and_says_why(cifar_small, tmp_path, monkeypatch, capsys):
    """A torch without AOTAutograd's switch for custom autograd.Functions (an older one: the attribute removed here):
    the model compiles and trains all the same, the compile cache's line says in one line what this torch lacks, and
    torch's caching precompile, not asked for, stays off."""
    import torch._functorch.config

    from training.compile_cache import for_run
    from training.config import TrainConfig

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "local"))
    monkeypatch.delattr(torch._functorch.config, "autograd_cache_allow_custom_autograd_functions")
    cache = tmp_path / "cache"
    cfg = TrainConfig(data=cifar_small, out=tmp_path / "run", compile_cache=cache)
    compiled = for_run(cfg, "probe", {}, "cpu", 1)
    name = "torch._functorch.config.autograd_cache_allow_custom_autograd_functions"
    lines = [line for line in compiled.cache.note.split("; ") if name in line]
    said = f"this torch has no {name}: graphs holding a custom autograd.Function (the UNet's) are traced anew"
    assert lines == [said]
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU(), torch.nn.Linear(8, 1))
    net = compiled.compile(module, None, torch.autocast("cpu", enabled=False))
    opt, x = torch.optim.SGD(module.parameters(), lr=0.1), torch.randn(16, 8)
    losses = []
    for step in range(5):
        opt.zero_grad(set_to_none=True)
        with compiled.first_step() if step == 0 else contextlib.nullcontext():
            loss = net(x).pow(2).mean()
            loss.backward()
        opt.step()
        losses.append(loss.item())
    assert not compiled.traced and not torch._dynamo.config.caching_precompile
    assert "compiled in " in compiled.finish(True) and losses[-1] < losses[0]
    assert compiled.save_error is None and compiled.saved is not None and compiled.saved.is_file()
