"""Benchmarks of cel_lens's stage-1 exact scan against a naive TransformerLens loop.

Not part of the installed package. Entry point: ``python -m benchmarks.run [--quick]`` (``make bench``,
``make bench-quick``); results go to ``benchmarks/RESULTS.md`` and ``figures/bench_scaling.{html,png}``.

* :mod:`benchmarks.naive`: the baseline a careful researcher writes without cel_lens
  (``run_with_hooks``, one head at a time, batch size 8, full forward passes).
* :mod:`benchmarks.workload`: the benchmark models, tokenizer and tasks (offline).
* :mod:`benchmarks.measure`: timers, peak-memory probes and the compute floor.
* :mod:`benchmarks.gpu_scan`: a self-contained stage-1 scan for one large GPU.
"""
