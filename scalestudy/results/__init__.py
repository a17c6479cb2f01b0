"""From run directories to numbers: collect, analyze, quality flags, the communication
model, findings, references, compare (pandas, no plotting)."""
