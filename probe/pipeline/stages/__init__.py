"""One module per stage. Each has its job functions (``fn(ctx: JobContext, **kwargs) -> dict``, calling only
the pinned interfaces of the other areas, docs/notes/INTERFACES.md) and ``stage(config, meta) -> Stage``,
which builds the stage from a pipeline's resolved config; probe.pipeline.graph lists them per pipeline
kind. Shared pieces: ``common`` (variants, run keys and configs, the training job, evaluation) and
``alignment``. Job results hold absolute paths; the engine rewrites them when a stage folder is renamed
from ``.partial`` to its final name.
"""
