"""The GPU check's parts (benchmarks/bench_gpu.py is its command; docs/performance.md, "One GPU").

- record.py: each part's figures written to the check's folder ($OUT) as the part ends, and the
  table of everything measured so far rewritten with them, so a timeout still returns them;
- compare.py: parts 0, 1 and 2 in the child process that holds the devices (the node, aiperf's
  trial against bare Keras on one device and on all of them);
- adapter.py: the feed as a trial gets it and the memory fit from XLA, through the functions of
  aiperf.train.feedrate and aiperf.train.fit, imported lazily;
- run.py: part 3, a short `aiperf run` on the ImageNet-shaped profile.
"""
