"""Benchmarks of cel_lens's stage-1 scans against the floor and the loops people run.

Not part of the installed package. Entry point: ``python -m benchmarks.run [--quick]`` (``make bench``,
``make bench-quick``); results go to ``benchmarks/RESULTS.md``, ``benchmarks/results.json`` and
``figures/bench_scaling.{html,png}``.

* :mod:`benchmarks.workload`: the checkpoint, tokenizer and tasks (offline).
* :mod:`benchmarks.floor`: the floor, ``transformers``' own forward (SDPA) and ``generate``.
* :mod:`benchmarks.lm_eval_loop`: lm-evaluation-harness, one harness call per head (``bench`` extra).
* :mod:`benchmarks.naive`: TransformerLens's ``run_with_hooks`` loop, one head at a time.
* :mod:`benchmarks.generation`: the MBPP generation scan against TransformerLens's ``generate``.
* :mod:`benchmarks.measure`, :mod:`benchmarks.scaling`, :mod:`benchmarks.report`: timers, profile
  and scaling, RESULTS.md.
* :mod:`benchmarks.limit`, :mod:`benchmarks.bounds`: today's FLOP count of an exact scan (formerly "the FLOP limit"; :mod:`benchmarks.scan_bound`: the bound with the savings it leaves) and generation's
  FLOP bound, from the real token shapes, and each case against them.
* :mod:`benchmarks.racing`: racing stage 1 against exact stage 1 (``python -m benchmarks.racing``).
* :mod:`benchmarks.smollm2`, :mod:`benchmarks.smollm2_lmeval`: SmolLM2-135M-Instruct, the real model.
* :mod:`benchmarks.gpu_scan`: forwards and scans at Llama-3.2-3B's shape on one GPU.
"""
