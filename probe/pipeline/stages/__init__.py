"""One module per stage, each with the face of probe.pipeline.stages.face: ``NAME``, ``INPUTS`` (the stage modules
whose results it reads), ``result(inputs)`` (its result, typed: what every later stage and the report read of it),
``check(config, *, deep)`` where it has settings, its job functions (``fn(ctx: JobContext, **kwargs) -> dict``) and
``stage(config, meta) -> Stage``. probe.pipeline.graph lists the modules per pipeline kind. Shared pieces: ``face``
(the result types and helpers), ``common`` (run keys and configs, the training job, the evaluation call), ``stores``
(which stage makes each variant's store) and ``alignment``.
"""
