"""From run directories to numbers (pandas, no plotting): one study's analysis
(`analysis/`) and the results store with what it holds over time (`history/`)."""
