"""``report_inputs.json``: the one file between the pipeline and the report, and the one owner of its name,
schema, reader, writer and paths (contract in full: docs/notes/INTERFACES.md).

Writers: the modify pipelines' report stage (``probe.pipeline.stages.report``) and the audit stage
(``probe.pipeline.stages.audit``), through ``write_inputs``; every report copies the file with the files the report
opens into its own folder (``archive_inputs``, ``ARCHIVE_DIR``), so that it renders again without the workdir.
Reader: ``probe report``, through ``load_inputs``; every
path the report opens goes through ``resolve_path``. The report is a pure function of this file and the files it
names: whatever needs a store, a trained model or torch is computed by the writer and recorded here.

Why here: the file is what the report reads, so its schema belongs with the report; the writers import it from
below. ``probe.report`` imports nothing from ``probe.pipeline``, ``probe.perturb``, ``probe.models`` or
``probe.train`` (tests/test_report_purity.py), while the pipeline already calls the report (the report stage's
``make_report``, the audit's verdict rule), so the pipeline importing this module adds no import that runs back
up. This module itself imports only ``probe.errors``, ``probe.provenance``, ``probe.rooted`` and ``probe.data.variants``.

Top-level keys (schema ``SCHEMA_VERSION``):

* from the stages' results: ``pipeline``, ``preset``, ``dataset``, ``workdir``, ``provenance``, ``stores``
  ({orig, mod, noise}: path, digest, epsilon), ``restarts``, ``manipulation``, ``manipulation_random`` (the frozen
  random-ψ control, stage manipulate-random; null where it did not run), ``runs``, ``robustness``, ``linear_pca``,
  ``why`` (report stage; with the control, ``why.global_pca_random``: orig → the control's x′), ``control`` (control
  pipeline), ``random_m`` (the models retrained on the random-ψ control's m, variant mod-random: {"store": {path,
  digest, epsilon}, "runs": [as ``runs``], "factor_capture": as the top-level one, computed by the writer}; null where
  no model trained on it — ``runs`` holds the orig, mod and noise runs only);
* computed by the writer from stores and models (schema 2): per store in ``stores`` ``factor_names``,
  ``factor_sizes``, ``num_images`` and, for orig and mod, ``mean_image_mse`` (for orig also ``factor_ceiling``, per
  factor the most of its entropy the images determine, ``probe.data.visibility``; files written before session 46 lack
  it and the report leaves it out); ``factor_capture`` (per retrained
  run, ``CAPTURE_FIELDS``); ``restart_latents`` (NMI matrices and latent-traversal PNGs of the selected
  restarts); ``manipulation_deviations`` (appendix B.1). A file without them (schema 1) still renders; the report
  says what it lacks (``missing_section``);
* ``setting`` (schema 3): the few configured values the report describes and judges by, recorded by the writer
  through the stage modules that own their TOML tables (probe.pipeline.report_inputs.setting), so that neither the
  report nor probe.pipeline.report_data reads the recorded pipeline config (``provenance.config``, shown verbatim in
  the report's provenance) by table name. Its parts (``SETTING_PARTS``): ``data``, the store's
  ``SETTING_DATA_FIELDS``; ``retraining``, {"steps": retrain.train's steps, "model_steps": {model: steps}};
  ``evaluation``, {"metrics", "seed", "sample_sizes"} (MIG's sample for the factor capture); ``manipulation``, the
  manipulation's config (appendix B.1). A part is null where the pipeline has no such table (the audit's config is
  its own TOML), ``setting`` is null where the writer had no config. A file without it (schema ≤ 2) gets it at load
  time from its recorded config (``setting_of_older_file``);
* ``step_costs`` (schema 4, computed by the writer from the retrained runs' step logs): {model: {"median_s",
  "fastest_decile_s", "intervals", "runs"}}, seconds per training step over every logged interval
  (``probe.train.run_folder.RunFolder.step_costs``): the host's speed as the run saw it, so that wall times of runs
  on different machines can be compared (this project's VM has run the same step 2.4× apart).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from probe import rooted
from probe.data.variants import VARIANTS
from probe.errors import UserError

FILE_NAME = "report_inputs.json"
# a report's copy of its inputs (``archive_inputs``): REPORT/inputs/part-<n>, one per workdir in the order given
ARCHIVE_DIR = "inputs"
SCHEMA_VERSION = 4
# the schema that added each computed section (``missing_section``)
SECTION_SCHEMA = {"factor_capture": 2, "restart_latents": 2, "manipulation_deviations": 2, "step_costs": 4}

# factor_capture["runs"][i]: which run, then either "error" or the per-factor capture (probe.metrics.mig.factor_capture
# and the run's active latents on the same sample); the report keeps this order in summary.json
CAPTURE_RUN_FIELDS = ("model", "variant", "seed", "run_dir")
CAPTURE_FIELDS = ("gap", "latent", "best_nmi", "mig", "active")
# factor_capture["sample"]: MIG's own sample, as the evaluation drew it
CAPTURE_SAMPLE_FIELDS = ("seed", "recorded", "num_train", "num_test", "draw_batch_size", "num_bins")
# stores[variant] facts the writer adds
STORE_FACTS = ("factor_names", "factor_sizes", "num_images", "mean_image_mse", "factor_ceiling")
# setting[part]: the configured values the report describes (the store's settings, the retraining steps) and the
# writer's report data uses (the evaluation's sample, the manipulation's config); setting["data"] holds the fields
SETTING_PARTS = ("data", "retraining", "evaluation", "manipulation")
SETTING_DATA_FIELDS = ("source", "resolution", "factor_sizes")


def inputs_path(folder) -> Path:
    """Where the file lives in ``folder`` (a workdir, a report job folder, ``WORKDIR/audits/<model>``)."""
    return Path(folder) / FILE_NAME


def write_inputs(folder, data: dict, *, workdir=None) -> Path:
    """Write ``data`` (stamped with ``SCHEMA_VERSION``) atomically as ``folder/report_inputs.json``. With ``workdir``
    (the pipeline's writers) every path under it is recorded relative to it (``probe.rooted``) and ``"workdir"`` as
    the workdir relative to ``folder``: the file stays right when the workdir is copied or moved."""
    from probe.provenance import write_json_atomic

    folder = Path(folder)
    if workdir is not None:
        data = {**rooted.mark(data, os.path.abspath(workdir)),
                "workdir": Path(os.path.relpath(os.path.abspath(workdir), os.path.abspath(folder))).as_posix()}
    path = inputs_path(folder)
    write_json_atomic(path, {**data, "schema": SCHEMA_VERSION})
    return path


def _recorded_root(data: dict, folder) -> str | None:
    """The absolute workdir of a file in ``folder`` whose ``"workdir"`` was recorded relative to it (``write_inputs``);
    None when it was recorded absolute (older code) or not at all. The one reading of that entry."""
    base = data.get("workdir")
    if isinstance(base, str) and base and not Path(base).is_absolute():
        return os.path.normpath(os.path.abspath(Path(folder) / base))
    return None


def copy_inputs(src, folder) -> Path:
    """Copy the file ``src`` (a ``report_inputs.json`` or its folder) into ``folder`` of the same workdir, its
    ``"workdir"`` entry rewritten for its new place."""
    from probe.provenance import write_json_atomic

    src = Path(src)
    src = inputs_path(src) if src.is_dir() else src
    data = json.loads(src.read_text())
    workdir = _recorded_root(data, src.parent)
    if workdir is not None:
        data["workdir"] = Path(os.path.relpath(workdir, os.path.abspath(folder))).as_posix()
    path = inputs_path(folder)
    write_json_atomic(path, data)
    return path


def opened_files(data: dict) -> list[str]:
    """The recorded paths (as they stand in ``data``, raw or loaded) of the files the report opens besides this one:
    the manipulation's Fig. 4 image and loss log, the random-ψ control's loss log, each retrained run's training
    curve (``resolve_path`` is called on exactly these). ``archive_inputs`` copies them."""
    values = []
    for section in ("manipulation", "manipulation_random"):
        record = data.get(section) or {}
        values += [record.get("figure4"), record.get("losses")]
    values += [run.get("curve") for run in data.get("runs") or [] if isinstance(run, dict)]
    return [v for v in values if isinstance(v, str) and v]


def archive_inputs(inputs: dict, folder) -> Path:
    """Write the loaded ``inputs`` (``load_inputs``) as ``folder/report_inputs.json`` with copies of the files the
    report opens (``opened_files``), so that ``probe report FOLDER`` renders the same report, and pools with another
    workdir of the experiment, after the workdir is gone (a workdir holds gigabytes of stores and checkpoints; this, a
    few megabytes). The copied files keep their place relative to the workdir and are recorded relative to
    ``folder``; every other path (stores, run folders) keeps the absolute path it had: where the run was, a name the
    report shows and never opens. A file the inputs name but that is missing is left out (the report says what it
    lacks, as from the workdir). Returns the archived file's path."""
    from probe.provenance import write_json_atomic

    workdir = inputs.get("workdir")  # load_inputs made a recorded relative workdir absolute
    root = os.path.abspath(workdir if isinstance(workdir, str) and Path(workdir).is_absolute() else inputs["_workdir"])
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    renamed = {}
    for number, value in enumerate(dict.fromkeys(opened_files(inputs))):
        path = resolve_path(inputs, value)
        if not path.is_file():
            continue
        inside = os.path.abspath(path).startswith(root + os.sep)
        relative = (Path(os.path.relpath(path, root)) if inside
                    else Path("outside-workdir") / f"{number}-{path.name}")
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
        renamed[value] = rooted.MARK + "/" + relative.as_posix()
    data = {key: value for key, value in inputs.items() if not key.startswith("_")}
    data = {**rooted.map_strings(data, lambda text: renamed.get(text, text)), "workdir": "."}
    path = inputs_path(folder)
    write_json_atomic(path, data)
    return path


def load_inputs(workdir) -> dict:
    """Read and check ``report_inputs.json`` (``workdir`` is its folder or the file); UserError with one message if
    missing or malformed. Optional sections are normalised (``robustness`` -> [], ``restarts`` -> [], ...). Paths
    recorded relative to the workdir become absolute where the file now stands (files of older code name absolute
    paths). ``_path`` and ``_workdir`` (the folder holding the file) are added."""
    workdir = Path(workdir)
    path = inputs_path(workdir) if workdir.is_dir() else workdir
    if not path.exists():
        raise UserError(f"{path} does not exist; run the pipeline to its report stage first "
                        "(`probe pipeline run NAME --workdir DIR`)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    runs = data.get("runs")
    if not isinstance(runs, list):
        raise UserError(f"{path}: 'runs' must be a list of runs")
    for i, run in enumerate(runs + list(data.get("robustness") or [])):
        if not isinstance(run, dict) or "model" not in run or "variant" not in run:
            raise UserError(f"{path}: run #{i} lacks 'model' or 'variant'")
        if run["variant"] not in VARIANTS:
            raise UserError(f"{path}: run #{i} has variant {run['variant']!r}; expected one of {', '.join(VARIANTS)}")
    data.setdefault("robustness", [])
    data["robustness"] = data["robustness"] or []
    data["restarts"] = data.get("restarts") or []
    data.setdefault("manipulation", None)
    data.setdefault("manipulation_random", None)
    data.setdefault("random_m", None)
    data.setdefault("linear_pca", None)
    data.setdefault("stores", {})
    data.setdefault("provenance", {})
    if "setting" not in data:
        data["setting"] = setting_of_older_file(recorded_config(data))
    root = _recorded_root(data, path.parent)
    if root is not None:
        data = {**rooted.unmark(data, root), "workdir": root}
    data["_path"] = str(path)
    data["_workdir"] = str(path.parent)
    data.setdefault("dataset", (data.get("stores", {}).get("orig") or {}).get("name") or "dataset")
    return data


def resolve(root, value) -> Path | None:
    """A recorded path: absolute, or relative to ``root`` (the folder holding the file; for a writer, the workdir its
    stage results are relative to). None for an empty value. The one resolver of recorded paths."""
    if not value:
        return None
    p = Path(value)
    return p if p.is_absolute() else Path(root) / p


def resolve_path(inputs: dict, value) -> Path | None:
    """``resolve`` against the folder holding the loaded inputs (``inputs["_workdir"]``); every path the report
    opens goes through here."""
    return resolve(inputs["_workdir"], value)


def setting(inputs: dict, part: str):
    """One part of the run's recorded setting (``SETTING_PARTS``), or None."""
    return (inputs.get("setting") or {}).get(part)


def recorded_config(inputs: dict) -> dict | None:
    """The pipeline config the run recorded (``provenance.config``), or None."""
    return (inputs.get("provenance") or {}).get("config")


def recorded_code_version(inputs: dict) -> dict:
    """The code version the run recorded (``provenance.code_version``: probe_version, git_commit, source_digest), or
    an empty dict: what the provenance bullets show and what ``probe.report.pool`` compares."""
    return (inputs.get("provenance") or {}).get("code_version") or {}


def setting_of_older_file(config: dict | None) -> dict | None:
    """Compatibility: the ``setting`` of a file written before schema 3, read out of the pipeline config it recorded
    (``provenance.config``: the TOML tables ``store``, ``retrain``, ``evaluate`` and ``manipulate``), as the report
    read it then. The one place the report looks into the recorded config by table name; newer files record
    ``setting`` themselves."""
    if not config:
        return None
    store, retrain = config.get("store") or {}, config.get("retrain") or {}
    per_model = retrain.get("model_train") or {}
    return {
        "data": {key: store.get(key) for key in SETTING_DATA_FIELDS} if store else None,
        "retraining": {"steps": (retrain.get("train") or {}).get("steps"),
                       "model_steps": {m: t["steps"] for m, t in per_model.items() if "steps" in (t or {})}}
        if retrain else None,
        "evaluation": config.get("evaluate") or None,
        "manipulation": (config.get("manipulate") or {}).get("config"),
    }


# The keys of the recorded config that choose *which* runs a workdir retrained — how many seeds, from which seed, which
# models — and not how each run was trained: two workdirs whose configs differ only in these hold runs of one
# experiment (``probe.report.pool``). Spelled here because the report does not import the pipeline's stage modules.
RUN_CHOICE_KEYS = (("retrain", "seeds"), ("retrain", "first_seed"), ("retrain", "models"))


def config_less_run_choice(config: dict | None) -> dict:
    """The recorded pipeline config (``provenance.config``) without ``RUN_CHOICE_KEYS``: what two workdirs must share
    for their runs to be pooled. The second place the report reads the config by table name (the first:
    ``setting_of_older_file``)."""
    config = json.loads(json.dumps(config or {}, default=str))
    for table, key in RUN_CHOICE_KEYS:
        if isinstance(config.get(table), dict):
            config[table].pop(key, None)
    return config


# The per-model tables of the recorded config: an entry there decides how that model's runs were trained and nothing
# else, so two workdirs need to agree on it only for the models both trained (``probe.report.pool``). A part that adds
# models to an experiment (``--set retrain.models=[...]`` with their settings by ``--set retrain.model_config.M...``)
# records entries the first part lacks.
PER_MODEL_TABLES = (("retrain", "model_config"), ("retrain", "model_train"), ("retrain", "model_variants"))


def config_for_models(config: dict, models) -> dict:
    """``config`` (a recorded pipeline config, not changed) with each ``PER_MODEL_TABLES`` table cut to the entries of
    ``models``."""
    config = json.loads(json.dumps(config or {}, default=str))
    keep = set(models)
    for table, key in PER_MODEL_TABLES:
        section = config.get(table)
        if isinstance(section, dict) and isinstance(section.get(key), dict):
            section[key] = {m: v for m, v in section[key].items() if m in keep}
    return config


def store_fact(inputs: dict, variant: str, key: str):
    """A fact the writer recorded about one variant's store (``STORE_FACTS``), or None."""
    return ((inputs.get("stores") or {}).get(variant) or {}).get(key)


def missing_section(key: str) -> str:
    """Why a computed section is absent: the file predates it."""
    return (f"{FILE_NAME} has no {key!r} (written before schema {SECTION_SCHEMA.get(key, SCHEMA_VERSION)}; "
            "re-run `probe pipeline run` so that its report stage computes it)")
