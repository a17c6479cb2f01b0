"""One study's numbers from its run directories: collect, speedup and efficiency, quality
flags, the communication model and its fits, forecasts, costs, findings, references,
compare, the adaptive rule; the whole computed once as an `Analysis` (study.py)."""
