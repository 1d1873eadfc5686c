"""Trainer: every registered model trains, checkpoints and resumes bit-identically on CPU; configs and CLI."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest
import torch

from probe.errors import UserError
from probe.models.ae import AE
from probe.models.base import bernoulli_reconstruction
from probe.models.registry import BUILTIN_MODELS
from probe.train import RunFolder, load_run, resolve_run_config, run_progress, train_run
from conftest import STORE_DAMAGES, damage_store, run_probe

FAST = {"batch_size": 8, "log_every": 5, "checkpoint_every": 10}
EXPECTED_MODELS = ["ae", "beta-vae", "beta-tcvae", "factor-vae", "dip-vae-i", "dip-vae-ii", "slow-vae", "rtc-vae", "pcl",
                   "linear-vae"]


def _module_exists(name: str) -> bool:
    return importlib.util.find_spec(BUILTIN_MODELS[name].partition(":")[0]) is not None


PRESENT_MODELS = [n for n in BUILTIN_MODELS if _module_exists(n)]

# The quantized models' published widths cost seconds per step on a CPU; the resume property does not
# depend on width, so they run narrow here (the same narrowing as the smoke pipeline preset).
NARROW = {
    "tripod": {"enc_widths": [8, 8, 16, 16, 32], "enc_hidden": 32, "dec_widths": [32, 16, 16, 8], "cond_dim": 16},
    "qlae": {"enc_widths": [8, 16, 16, 32], "dec_widths": [32, 16, 16, 8], "dense_width": 32},
    "factor-qvae": {"channels": 16, "hidden": 16, "dec_input_channels": 16, "disc_width": 32},
    "qvae": {"channels": 16, "hidden": 16, "dec_input_channels": 16},
    "dvae": {"channels": 16, "hidden": 16, "dec_input_channels": 16},
    "factor-vae": {"disc_width": 32},   # the 6 × 1000-unit discriminator made these two the slowest tests (85 s, 237 s)
    "rtc-vae": {"disc_width": 32},
}


def _params(run_dir):
    model, _ = load_run(run_dir)
    return model.state_dict()


def _losses(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("img_per_s", "wall_time_s")} for r in rows]


def _assert_same_params(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


# -- every model ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PRESENT_MODELS)
def test_model_trains_and_resumes_bit_identically(name, make_toy_store, tmp_path):
    store = make_toy_store()
    config = {"model": name, "seed": 3, "model_config": NARROW.get(name, {}), "train": {"steps": 50, **FAST}}
    straight = train_run(config, store, tmp_path / "straight", progress=False)
    done = json.loads((straight / "done.json").read_text())
    assert done["steps"] == 50 and math.isfinite(done["final"]["loss"])
    assert (straight / "checkpoint.pt").exists()
    rows = _losses(straight)
    assert [r["step"] for r in rows] == list(range(5, 51, 5))
    assert all(math.isfinite(r["loss"]) for r in rows)

    # killed after step 35 (last checkpoint: step 30), then resumed to the end
    killed = train_run(config, store, tmp_path / "killed", progress=False, stop_after=35)
    assert not (killed / "done.json").exists()
    assert torch.load(killed / "checkpoint.pt", weights_only=True)["step"] == 30
    train_run(config, store, killed, progress=False)
    assert (killed / "done.json").exists()
    _assert_same_params(_params(straight), _params(killed))
    assert _losses(straight) == _losses(killed)


def test_registry_lists_every_expected_model():
    """Fails until the objectives engineer's modules exist (beta_tcvae, factor_vae, dip_vae, slow_vae, rtc_vae, pcl)."""
    from probe.models.registry import available_models

    missing = [n for n in EXPECTED_MODELS if n not in available_models()]
    assert not missing, f"models not available yet: {missing}"


# -- trainer behaviour -------------------------------------------------------------------------------------

def test_extend_finished_run_matches_longer_run(make_toy_store, tmp_path):
    store = make_toy_store()
    base = {"model": "beta-vae", "seed": 0, "model_config": {"beta": 4.0}}
    long = train_run({**base, "train": {"steps": 50, **FAST}}, store, tmp_path / "long", progress=False)
    short = train_run({**base, "train": {"steps": 30, **FAST}}, store, tmp_path / "short", progress=False)
    assert json.loads((short / "done.json").read_text())["steps"] == 30
    train_run({**base, "train": {"steps": 50, **FAST}}, store, short, progress=False)
    _assert_same_params(_params(long), _params(short))
    assert json.loads((short / "done.json").read_text())["steps"] == 50


def test_seed_determines_the_run(make_toy_store, tmp_path):
    store = make_toy_store()
    cfg = {"model": "beta-vae", "train": {"steps": 10, **FAST}}
    a = _params(train_run({**cfg, "seed": 1}, store, tmp_path / "a", progress=False))
    b = _params(train_run({**cfg, "seed": 1}, store, tmp_path / "b", progress=False))
    c = _params(train_run({**cfg, "seed": 2}, store, tmp_path / "c", progress=False))
    _assert_same_params(a, b)
    assert not torch.equal(a["encoder.means.weight"], c["encoder.means.weight"])


def test_global_rng_of_the_caller_is_untouched(make_toy_store, tmp_path):
    store = make_toy_store()
    torch.manual_seed(42)
    np.random.seed(42)
    expected_t, expected_n = torch.rand(3), np.random.rand(3)
    torch.manual_seed(42)
    np.random.seed(42)
    train_run({"model": "ae", "train": {"steps": 3, **FAST}}, store, tmp_path / "r", progress=False)
    assert torch.equal(torch.rand(3), expected_t)
    assert np.array_equal(np.random.rand(3), expected_n)


def test_run_directory_records_provenance(make_toy_store, tmp_path):
    store = make_toy_store()
    out = train_run({"model": "beta-vae", "seed": 5, "train": {"steps": 10, **FAST}}, store.path, tmp_path / "r",
                    progress=False)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["seed"] == 5 and cfg["model"] == "beta-vae"
    assert cfg["store"]["digest"] == store.digest and cfg["store"]["path"] == str(store.path)
    assert cfg["model_config"]["num_latent"] == store.num_factors  # defaults to the number of factors
    assert cfg["train"]["steps"] == 10 and cfg["train"]["batch_size"] == 8
    assert "source_digest" in cfg["code_version"] and "torch" in cfg["environment"]
    assert cfg["runtime"]["device"] == "cpu" and cfg["runtime"]["precision"] == "fp32"
    model, loaded_cfg = load_run(out)
    assert not model.training and loaded_cfg["seed"] == 5
    x = torch.rand(3, 1, 16, 16)
    assert model.encode(x).shape == (3, store.num_factors)


def test_the_recorded_cpu_capability_is_the_one_the_kernels_run():
    """A CPU run repeats bit for bit only under the same kernels (AVX2 vs AVX512 round differently; measured in
    docs/notes/train.md), so the environment records which ran: forcing them changes the record."""
    import os
    import subprocess
    import sys

    from probe.provenance import environment

    assert environment()["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    forced = subprocess.run([sys.executable, "-c", "from probe.provenance import environment; "
                             "print(environment()['cpu_capability'])"], capture_output=True, text=True, check=True,
                            env={**os.environ, "ATEN_CPU_CAPABILITY": "default"})
    assert forced.stdout.strip() == "DEFAULT"


def test_the_environment_records_the_other_kernel_switches_only_when_set():
    """oneDNN's and MKL's own switches move a CPU run as much as ATen's (presets.md, forty-first leg): a run made
    under one says so, and a run made under none records no switch at all."""
    import json
    import os
    import subprocess
    import sys

    from probe.provenance import KERNEL_SWITCHES, environment

    code = "import json; from probe.provenance import environment; print(json.dumps(environment()))"
    clean = {k: v for k, v in os.environ.items() if k not in KERNEL_SWITCHES}
    plain = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                      env=clean).stdout)
    assert "kernel_switches" not in plain and plain["cpu"] == environment()["cpu"]
    forced = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       env={**clean, "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"}).stdout)
    assert forced["kernel_switches"] == {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"}


def test_complete_run_is_returned_untouched_and_no_resume_refuses(make_toy_store, tmp_path):
    store = make_toy_store()
    cfg = {"model": "ae", "train": {"steps": 5, **FAST}}
    out = train_run(cfg, store, tmp_path / "r", progress=False)
    mtime = (out / "checkpoint.pt").stat().st_mtime_ns
    train_run(cfg, store, out, progress=False)
    assert (out / "checkpoint.pt").stat().st_mtime_ns == mtime
    with pytest.raises(UserError, match="already exists"):
        train_run(cfg, store, out, resume=False, progress=False)
    with pytest.raises(UserError, match="different configuration"):
        train_run({**cfg, "seed": 9}, store, out, progress=False)
    with pytest.raises(UserError, match="cannot be shortened"):
        train_run({**cfg, "train": {**cfg["train"], "steps": 3}}, store, out, progress=False)


def test_load_run_refuses_incomplete_run(make_toy_store, tmp_path):
    store = make_toy_store()
    out = train_run({"model": "ae", "train": {"steps": 20, **FAST}}, store, tmp_path / "r", progress=False, stop_after=15)
    with pytest.raises(UserError, match="not complete"):
        load_run(out)
    model, _ = load_run(out, allow_incomplete=True)
    assert not model.training


def test_run_progress_reads_the_last_logged_step_and_the_done_record(make_toy_store, tmp_path):
    store = make_toy_store()
    assert run_progress(tmp_path / "r") is None  # nothing started there
    cfg = {"model": "ae", "train": {"steps": 20, **FAST}}
    out = train_run(cfg, store, tmp_path / "r", progress=False, stop_after=15)
    # stopped like a kill after step 15: the progress is the log's last row (checkpoint at 10, rows every 5 steps)
    logged = RunFolder(out).read_log()[-1]["step"]
    assert 10 <= logged < 20 and run_progress(out) == {"step": logged, "steps": 20, "complete": False}
    train_run(cfg, store, out, progress=False)
    assert run_progress(out) == {"step": 20, "steps": 20, "complete": True}


class ExplodingAE(AE):
    """Test plug-in: the loss turns NaN from step index 25 on (the 26th step)."""

    name = "exploding-ae"

    def loss(self, batch, step):
        recon = bernoulli_reconstruction(self.decode(self.encoder(batch.x)), batch.x)
        if step >= 25:
            recon = recon * float("nan")
        return recon, {"reconstruction": recon.detach()}


def test_nan_loss_stops_with_step_and_keeps_last_good_checkpoint(make_toy_store, tmp_path):
    store = make_toy_store()
    out = tmp_path / "r"
    with pytest.raises(UserError, match=r"NaN or infinite at step 26 of 50") as info:
        train_run({"model": "test_train:ExplodingAE", "train": {"steps": 50, **FAST}}, store, out, progress=False)
    assert "step 20" in str(info.value)
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["step"] == 20
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values())
    assert not (out / "done.json").exists()
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [5, 10, 15, 20, 25]


class CheckedPairAE(AE):
    """Test plug-in: a pair model whose next state moves the last factor by +1 (mod size); the loss checks
    that the trainer fetched exactly the image of that state (C-order ravel)."""

    name = "checked-pair-ae"
    needs_pairs = True
    seen = 0

    class Sampler:
        def __init__(self, sizes):
            self.sizes = torch.tensor(sizes)

        def sample_next(self, factors, generator):
            nxt = factors.clone()
            nxt[:, -1] = (nxt[:, -1] + 1) % self.sizes[-1]
            return nxt

    def pair_sampler(self, factor_sizes):
        self.sizes = list(factor_sizes)
        return self.Sampler(factor_sizes)

    def loss(self, batch, step):
        from conftest import render_toy_images

        nxt = batch.factors.clone().numpy()
        nxt[:, -1] = (nxt[:, -1] + 1) % self.sizes[-1]
        expected = torch.from_numpy(render_toy_images(nxt, self.sizes, 16, 1)).permute(0, 3, 1, 2).float() / 255
        assert torch.equal(batch.x_next, expected)
        type(self).seen += 1
        return super().loss(batch, step)


def test_pairs_are_fetched_by_c_order_index(make_toy_store, tmp_path):
    store = make_toy_store()
    CheckedPairAE.seen = 0
    train_run({"model": "test_train:CheckedPairAE", "train": {"steps": 4, **FAST}}, store, tmp_path / "r", progress=False)
    assert CheckedPairAE.seen == 4


def test_pairs_need_a_complete_grid(tmp_path):
    from probe.data import StateSpace, write_store

    sizes = (2, 3, 4, 4)
    factors = StateSpace(sizes).all_factors()[::2]
    images = np.zeros((len(factors), 16, 16, 1), dtype=np.uint8)
    store = write_store(tmp_path / "sub.zarr", images, factors, name="toy", factor_names=list("abcd"),
                        factor_sizes=list(sizes), factor_values=[list(range(s)) for s in sizes],
                        origin={"kind": "synthetic"}, grid=None)
    with pytest.raises(UserError, match="complete factor grid"):
        resolve_run_config({"model": "test_train:CheckedPairAE"}, store)
    # non-pair models train on incomplete grids
    train_run({"model": "ae", "train": {"steps": 2, **FAST}}, store, tmp_path / "r", progress=False)


@pytest.mark.parametrize("bad,match", [
    ({"model": "beta-vae", "bogus": 1}, "unknown run config key"),
    ({"model": "beta-vae", "train": {"stepz": 3}}, "unknown train setting"),
    ({"model": "beta-vae", "train": {"steps": 0}}, "positive integer"),
    ({"model": "beta-vae", "train": {"precision": "fp8"}}, "precision"),
    ({"model": "beta-vae", "model_config": {"betta": 2}}, "no hyperparameter 'betta'"),
    ({"model": "no-such-model"}, "unknown model"),
    ({"model": "beta-vae", "seed": -1}, "seed"),
])
def test_resolve_run_config_rejects_bad_input(bad, match, make_toy_store, tmp_path):
    store = make_toy_store()
    with pytest.raises(UserError, match=match):
        resolve_run_config(bad, store)
    with pytest.raises(UserError):
        train_run(bad, store, tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()  # nothing written before validation passed


def test_resolve_run_config_uses_dataset_presets(make_toy_store):
    store = make_toy_store()
    assert resolve_run_config({"model": "beta-vae"}, store)["model_config"]["beta"] == 1.0
    r = resolve_run_config({"model": "beta-vae", "dataset": "dsprites", "train": {"steps": 7}}, store)
    assert r["model_config"]["beta"] == 8 and r["train"]["steps"] == 7 and r["train"]["batch_size"] == 64
    assert r["model_class"] == "probe.models.beta_vae:BetaVAE"
    store32 = make_toy_store(resolution=32, channels=3, name="shapes3d")
    assert resolve_run_config({"model": "beta-vae"}, store32)["model_config"]["beta"] == 32
    bad_res = make_toy_store(resolution=24)
    with pytest.raises(UserError, match="cannot be built"):
        resolve_run_config({"model": "beta-vae"}, bad_res)


# -- CLI ---------------------------------------------------------------------------------------------------



def test_cli_models_list(capsys):
    code, out, _ = run_probe(["models", "list"], capsys)
    assert code == 0
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    for name in ("ae", "beta-vae", "linear-vae"):
        assert name in names
    line = next(line for line in out.splitlines() if line.startswith("beta-vae "))
    assert "continuous" in line and "β-VAE" in line


def test_cli_train_and_set_routing(make_toy_store, tmp_path, capsys):
    store = make_toy_store()
    out = tmp_path / "run"
    code, stdout, err = run_probe(["train", "beta-vae", "--data", str(store.path), "--out", str(out), "--steps", "6", "--seed", "4",
                              "--set", "beta=2.5", "--set", "batch_size=4", "--set", "log_every=3", "--no-progress"], capsys)
    assert code == 0, err
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_config"]["beta"] == 2.5 and cfg["train"]["batch_size"] == 4 and cfg["train"]["steps"] == 6
    assert cfg["seed"] == 4
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2

    code, _, err = run_probe(["train", "beta-vae", "--data", str(store.path), "--out", str(tmp_path / "x"), "--set", "betta=1"],
                        capsys)
    assert code == 2 and "betta" in err and "batch_size" in err and "beta" in err
    assert "Traceback" not in err and not (tmp_path / "x").exists()
    code, _, err = run_probe(["train", "nope", "--data", str(store.path), "--out", str(tmp_path / "y")], capsys)
    assert code == 2 and "unknown model" in err


@pytest.mark.parametrize("damage", STORE_DAMAGES)
def test_cli_train_refuses_a_corrupt_store_and_leaves_no_run(make_toy_store, tmp_path, capsys, damage):
    store = make_toy_store()
    damage_store(store.path, damage)
    out = tmp_path / "run"
    code, _, err = run_probe(["train", "beta-vae", "--data", str(store.path), "--out", str(out), "--steps", "2"], capsys)
    assert code == 2 and str(store.path) in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("setting", ["beta=abc", "lr=fast", "lr=true"])
def test_cli_train_bad_hyperparameter_type_exits_2(make_toy_store, tmp_path, capsys, setting):
    store = make_toy_store()
    out = tmp_path / "run"
    code, _, err = run_probe(["train", "beta-vae", "--data", str(store.path), "--out", str(out), "--steps", "2",
                              "--set", setting], capsys)
    key = setting.split("=")[0]
    assert code == 2 and f"hyperparameter {key!r} must be a number" in err and "Traceback" not in err
    assert not out.exists()


def test_retry_after_nan_stop_with_new_lr_succeeds_on_same_out(make_toy_store, tmp_path, capsys):
    store = make_toy_store()
    out = tmp_path / "r"
    argv = ["train", "test_train:ExplodingAE", "--data", str(store.path), "--out", str(out), "--no-progress",
            "--set", "checkpoint_every=10", "--set", "log_every=5", "--set", "batch_size=8"]
    code, _, err = run_probe(argv + ["--steps", "50"], capsys)
    assert code == 2 and "NaN or infinite at step 26" in err and (out / "failed.json").exists()
    # the failed run does not block a retry with another configuration on the same --out
    code, _, err = run_probe(argv + ["--steps", "20", "--set", "lr=1e-5"], capsys)
    assert code == 0, err
    assert (out / "done.json").exists() and not (out / "failed.json").exists()
    assert json.loads((out / "config.json").read_text())["model_config"]["lr"] == 1e-5


def test_another_configuration_over_a_healthy_run_needs_overwrite(make_toy_store, tmp_path):
    store = make_toy_store()
    out = tmp_path / "r"
    base = {"model": "ae", "train": {"steps": 10, **FAST}}
    train_run(base, store, out, progress=False)
    other = {**base, "model_config": {"lr": 1e-5}}
    with pytest.raises(UserError, match="pass --overwrite to replace it"):
        train_run(other, store, out, progress=False)
    train_run(other, store, out, progress=False, overwrite=True)
    assert json.loads((out / "config.json").read_text())["model_config"]["lr"] == 1e-5


# -- compacted runs (pipeline.keep_checkpoints = "final-weights") ------------------------------------------------

def test_compacted_run_evaluates_identically_and_refuses_extension(make_toy_store, tmp_path, capsys):
    import shutil

    from probe.metrics import evaluate_run
    from probe.pipeline.stages.common import KEEP_FINAL_WEIGHTS, keep_run
    from probe.train import RunFolder
    from probe.train.run_folder import COMPACTED

    store = make_toy_store()
    full = train_run({"model": "factor-vae", "seed": 3, "train": {"steps": 12, **FAST}}, store.path, tmp_path / "full",
                     progress=False)
    compacted = tmp_path / "compacted"
    shutil.copytree(full, compacted)
    keep_run(compacted, KEEP_FINAL_WEIGHTS)
    record = RunFolder(compacted).compact(hint="unused: already compacted")  # idempotent: the first record stays
    assert "keep_checkpoints" in record["hint"] and record["bytes_before"] == (full / "checkpoint.pt").stat().st_size
    assert record["bytes_after"] == (compacted / "checkpoint.pt").stat().st_size < record["bytes_before"] / 2
    payload = RunFolder(compacted).load_checkpoint()
    assert set(payload) == {"format", "step", "wall_time_s", "identity_digest", "model", COMPACTED}
    _assert_same_params(_params(full), _params(compacted))
    sizes = {"num_train": 200, "num_test": 100, "num_reconstruction": 50, "dci_n_estimators": 3}
    metrics = ["mig", "reconstruction", "dci", "active_units"]
    assert (evaluate_run(compacted, store.path, metrics=metrics, **sizes)["metrics"]
            == evaluate_run(full, store.path, metrics=metrics, **sizes)["metrics"])

    # the same steps: complete, returned untouched; more steps: the state to continue from is gone
    train_run({"model": "factor-vae", "seed": 3, "train": {"steps": 12, **FAST}}, store.path, compacted, progress=False)
    code, _, err = run_probe(["train", "factor-vae", "--data", str(store.path), "--out", str(compacted), "--seed", "3",
                              "--steps", "20", "--set", "batch_size=8", "--set", "log_every=5",
                              "--set", "checkpoint_every=10", "--no-progress"], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"{compacted} was kept weights-only" in err and "cannot be continued to 20 steps" in err
    assert 'set keep_checkpoints = "all"' in err and "--set pipeline.keep_checkpoints=all" in err
    assert json.loads((compacted / "done.json").read_text())["steps"] == 12  # the refused run is left as it was
    train_run({"model": "factor-vae", "seed": 3, "train": {"steps": 20, **FAST}}, store.path, full, progress=False)
    assert json.loads((full / "done.json").read_text())["steps"] == 20  # an uncompacted run extends


def test_only_finished_runs_are_compacted(make_toy_store, tmp_path):
    from probe.train import ManipulationRunFolder, RunFolder

    store = make_toy_store()
    out = train_run({"model": "ae", "train": {"steps": 20, **FAST}}, store, tmp_path / "r", progress=False, stop_after=15)
    with pytest.raises(UserError, match=r"not complete \(no done.json\); only a finished run can be compacted"):
        RunFolder(out).compact(hint="")
    folder = ManipulationRunFolder(tmp_path / "m")
    folder.path.mkdir()
    folder.write_done({"steps": 1})
    with pytest.raises(UserError, match="a manipulation run cannot be compacted"):
        folder.compact(hint="")
