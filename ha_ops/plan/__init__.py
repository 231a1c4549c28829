"""Planning for a training job's reliability: pure functions over data, no I/O and no cluster.

- checkpoint: the checkpoint interval (Young 1974; Daly 2006, eq. 37) from the MTBF and the checkpoint cost;
- failures: the failure mix (Llama 3, arXiv 2407.21783, Table 5), fleet failure rates and recovery paths;
- ettr: the closed forms of Kokolis et al., HPCA 2025 (arXiv 2410.21680): job MTTF and ETTR;
- spares: the spares that keep a pool at full capacity through repair times, with a target probability;
- simulate: a discrete-event goodput simulator, vectorised across replications with numpy;
- presets and gameday_input: detection and recovery times, from presets or a game day's measured report.

Durations are seconds (float) everywhere inside; durations parses and formats the "3.1h" the CLI takes.
"""
