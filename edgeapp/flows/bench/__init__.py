"""`edgeapp bench`: latency, throughput, TOPS and TOPS/W of a model or the synthetic TOPS model,
on the CPU, one Edge TPU or several.

  run.py            whole runs: the devices asked for, one report (table or JSON), the peaks kept
  which_devices.py  which devices --device means for a benchmark (`all`, lists, `auto`)
  one_device.py     one device: cold and warm latency percentiles, throughput, TOPS, power
  threads.py        --threads auto: the thread sweep in interleaved rounds
  thermal.py        the clock, heat and throttling seen during a run (latency per window)
  several_tpus.py   several Edge TPUs: data-parallel and segment-pipeline throughput
  synthetic.py      the synthetic model whose MACs are known (--synthetic), and its TOPS
"""
